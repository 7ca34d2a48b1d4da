"""The nameserver's memory is capped over all its connections (issue 22, item 3): peers that half-send large frames
and trickle a byte to keep them alive are refused past ``serverMaxHeldBytes`` and closed ``serverFrameTimeoutMillis``
after their frame's first byte; peers that never read their answers are bounded too; a normal client keeps
getting routes throughout."""

from __future__ import annotations

import pytest

from harness.memory_attacks import MIB, PartialFrames, RssPeak, UnreadAnswers
from harness.metrics_page import sample_value, scrape_samples
from harness.procs import Namesrv
from harness.waiting import async_wait_until
from remoting.codes import RequestCode
from tests.integration.namesrv.conftest import Names, register, route_addrs

pytestmark = pytest.mark.integration

CAP = 48 * MIB
FRAME_TIMEOUT_MS = 3000
SLACK = 40 * MIB  # the interpreter's own growth under load: buffers of reads, answers, allocator arenas


@pytest.fixture
def capped_namesrv(tmp_path):
    with Namesrv(tmp_path / "ns", serverMaxHeldBytes=CAP, serverFrameTimeoutMillis=FRAME_TIMEOUT_MS) as ns:
        yield ns


async def test_half_sent_frames_are_capped_and_closed_by_the_frame_deadline(capped_namesrv, client):
    ns = capped_namesrv
    names = Names()
    await register(client, ns.addr, names, topics=[names.topic])
    rss = RssPeak(ns.pid)
    # 32 peers x 8 MiB frames, 4 MiB sent and one byte every 0.5 s: 128 MiB unbounded, 4 times the cap
    attack = PartialFrames(ns.addr, 32, frame=8 * MIB, sent=4 * MIB, trickle_s=0.5).start()
    try:
        # a normal client is served while the attack runs
        for _ in range(5):
            assert await route_addrs(client, ns.addr, names.topic) == {0: names.master_addr}
        await async_wait_until(lambda: attack.closed == attack.connections, FRAME_TIMEOUT_MS / 1000 + 10,
                               lambda: f"{attack.closed} of {attack.connections} trickling peers closed:\n"
                                       f"{ns.log_tail()}")
    finally:
        attack.stop()
        rss.stop()
    assert await route_addrs(client, ns.addr, names.topic) == {0: names.master_addr}
    assert rss.growth < CAP + SLACK, f"RSS grew {rss.growth / MIB:.0f} MiB, cap {CAP / MIB:.0f} MiB"
    # those admitted were closed by the deadline (not by idleness: they kept sending), the others refused
    assert min(attack.closed_at) < FRAME_TIMEOUT_MS / 1000, "no peer was refused at once"
    output = ns.output()
    assert "raise serverMaxHeldBytes if legitimate peers meet this" in output
    assert "still incomplete 3 s after its first byte" in output and "serverFrameTimeoutMillis" in output
    samples = scrape_samples(ns.metrics_port)
    closed = {s.labels["reason"]: s.value for s in samples if s.name == "rocketmq_remoting_connections_closed_total"}
    assert closed["frame_refused"] >= 1 and closed["frame_timeout"] >= 1, closed
    # (one may be shed instead: the admitted frames fill the cap, and any other byte then passes it)
    assert closed["frame_refused"] + closed["frame_timeout"] + closed["shed"] == attack.connections, closed
    limit = [s.value for s in samples if s.name == "rocketmq_remoting_held_bytes_limit"]
    assert limit == [CAP]
    await async_wait_until(lambda: held_bytes(ns) < 64 * 1024, 5, "held bytes did not return after the attack")


async def test_peers_that_never_read_their_answers_are_bounded(capped_namesrv, client):
    ns = capped_namesrv
    names = Names()
    # 400 topics make the topic list a 12 KB answer: few requests fill a peer's buffers, so the attack costs little CPU
    topics = [f"{names.topic}-unread-answers-{i:04d}" for i in range(400)]
    await register(client, ns.addr, names, topics=topics)
    rss = RssPeak(ns.pid)
    # 32 peers asking and reading nothing: each would hold up to 64 MiB of answers (its write cap) for 30 s
    attack = UnreadAnswers(ns.addr, 32, requests=4000, code=RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                           ext={}).start()
    try:
        await async_wait_until(attack.settled, 60, "the server kept reading the peers that do not read")
        for _ in range(5):
            assert await route_addrs(client, ns.addr, names.topic + "-unread-answers-0000") == {0: names.master_addr}
    finally:
        attack.stop()
        rss.stop()
    assert rss.growth < CAP + SLACK, f"RSS grew {rss.growth / MIB:.0f} MiB, cap {CAP / MIB:.0f} MiB"
    assert sample_value(ns.metrics_port, "rocketmq_remoting_connections_closed_total", reason="shed") >= 1
    assert "more than serverMaxHeldBytes=" in ns.output()
    await async_wait_until(lambda: held_bytes(ns) < 64 * 1024, 10, "held bytes did not return after the attack")


def held_bytes(ns: Namesrv) -> float:
    return sample_value(ns.metrics_port, "rocketmq_remoting_held_bytes")
