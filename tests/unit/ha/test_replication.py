"""Replication in one process (RocketMQ HATest): a SYNC/ASYNC master store and a SLAVE store over loopback."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest

from broker.config import BrokerRole, CatchUpFrom
from broker.store.types import PutStatus
from remoting import ha_codec, ha_handshake
from harness.waiting import async_wait_until
from tests.unit.ha import harness as h

pytestmark = pytest.mark.timeout(120)
MiB = 1024 * 1024


async def connected(m: h.Node, n: int = 1) -> None:
    await async_wait_until(lambda: m.ha.master.connected_slaves() == n, 10, f"{n} slave(s) connected to the master")


def delete_oldest_files(node: h.Node) -> int:
    """Expire every commitlog file but the last (as cleanup would after fileReservedTime)."""
    cleanup = node.store._cleanup
    deleted = cleanup.delete_commitlog_files(now_s=time.time() + 10**9)
    cleanup.clean_consume_queues()
    return deleted


async def test_after_a_sync_run_the_slave_commitlog_and_consume_queues_equal_the_master(tmp_path):
    m = await h.master(tmp_path / "m")
    s = await h.slave(tmp_path / "s", m)
    await connected(m)
    statuses = set()
    for i in range(120):  # ~3.6 MiB: several 1 MiB files
        r = await h.put(m, 30, 1000, queue_id=i % 3)
        statuses.add(r.status)
    assert statuses == {PutStatus.PUT_OK}
    assert m.store.max_phy_offset > 3 * MiB
    await h.wait_caught_up(m, s)
    h.assert_commitlogs_identical(m, s)
    assert h.cq_files(s) == h.cq_files(m)
    for q in range(3):
        assert s.store.max_offset_in_queue("TopicTest", q) == m.store.max_offset_in_queue("TopicTest", q) == 1200
    status = m.ha.status()
    assert status.in_sync_slave_nums == 1 and status.slaves[0].state == "OK"
    assert s.ha.status().client.connected is True


async def test_a_sync_put_returns_put_ok_only_after_the_slave_acked_its_end_offset(tmp_path):
    m = await h.master(tmp_path / "m")
    s = await h.slave(tmp_path / "s", m)
    await connected(m)
    results = await asyncio.gather(*(h.put(m, 20, 500, queue_id=i % 4) for i in range(40)))
    for r in results:
        assert r.status is PutStatus.PUT_OK
        # the ack covering this batch had arrived by the time the put returned
        assert m.ha.push2slave_max_offset >= r.next_offset
    assert s.store.max_phy_offset >= max(r.next_offset for r in results)


async def test_without_a_slave_a_sync_put_answers_slave_not_available_at_once(tmp_path):
    m = await h.master(tmp_path / "m")
    r = await h.put(m, 5)  # no slave connected: answered without waiting slaveTimeout (the remark says why)
    assert r.status is PutStatus.SLAVE_NOT_AVAILABLE
    assert "no slave connected" in r.remark and str(m.ha.ha_port) in r.remark
    assert m.store.max_phy_offset == r.next_offset  # stored on the master anyway


async def test_an_async_master_answers_put_ok_without_a_slave(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    assert (await h.put(m, 5)).status is PutStatus.PUT_OK


async def test_a_stopped_slave_makes_sync_puts_fail_fast_and_a_silent_one_times_out(tmp_path):
    m = await h.master(tmp_path / "m", slave_timeout=300)
    s = await h.slave(tmp_path / "s", m)
    await connected(m)
    assert (await h.put(m)).status is PutStatus.PUT_OK
    await s.stop()
    await connected(m, 0)
    assert (await h.put(m)).status is PutStatus.SLAVE_NOT_AVAILABLE
    # A peer that completes the handshake but never acks: the SYNC put waits slaveTimeout, then times out.
    peer = await h.RawPeer.connect(m.ha_addr)
    await peer.handshake(broker_id=2)
    peer.send(ha_codec.encode_report(m.store.max_phy_offset))
    await connected(m)
    start = time.monotonic()
    r = await h.put(m)
    elapsed = time.monotonic() - start
    assert r.status is PutStatus.FLUSH_SLAVE_TIMEOUT, r
    assert elapsed >= 0.25  # it waited its slaveTimeout; how much longer is a timing (bench/), not a fact
    assert "slaveTimeout=300 ms" in r.remark
    peer.close()


async def test_an_empty_slave_copies_from_the_master_min_offset_across_several_files(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    await h.fill(m, int(4.5 * MiB))
    assert delete_oldest_files(m) >= 4
    assert m.store.min_phy_offset == 4 * MiB
    await h.fill(m, int(6.5 * MiB))
    s = await h.slave(tmp_path / "s", m)
    await h.wait_caught_up(m, s)
    assert s.store.min_phy_offset == m.store.min_phy_offset == 4 * MiB
    h.assert_commitlogs_identical(m, s)
    names = [p.name for p in h.commitlog_files(s)]
    assert names[:3] == [f"{k * MiB:020d}" for k in (4, 5, 6)]  # a 4th may be pre-allocated
    assert m.ha.status().slaves[0].transfer_from == 4 * MiB


async def test_with_last_file_an_empty_slave_starts_at_the_newest_master_file(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER, ha_slave_catch_up_from=CatchUpFrom.LAST_FILE)
    await h.fill(m, int(2.5 * MiB))
    s = await h.slave(tmp_path / "s", m)
    await h.wait_caught_up(m, s)
    assert s.store.min_phy_offset == 2 * MiB
    assert h.commitlog_files(s)[0].name == f"{2 * MiB:020d}"
    h.assert_commitlogs_identical(m, s)


async def test_a_slave_behind_the_master_min_gets_an_error_frame_and_a_clear_log(tmp_path, caplog):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    s = await h.slave(tmp_path / "s", m)
    await h.fill(m, int(1.5 * MiB))
    await h.wait_caught_up(m, s)
    await s.stop()
    await h.fill(m, int(3.5 * MiB))
    delete_oldest_files(m)
    assert m.store.min_phy_offset == 3 * MiB > s.store.max_phy_offset
    caplog.set_level(logging.INFO)
    s2 = await h.Node(s.settings).start()
    await async_wait_until(lambda: s2.ha.counters.error_frames_received >= 1, 10, "error frame at the slave")
    text = caplog.text
    assert "SLAVE_BEHIND_MASTER_MIN" in text and "wipe the slave store" in text
    assert f"Slave max offset {s2.store.max_phy_offset}, master min {3 * MiB}" in text
    assert "before the master's min offset" in text  # the master's own log line
    assert m.ha.push2slave_max_offset < 3 * MiB


async def test_a_slave_ahead_of_the_master_gets_an_error_frame(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    await h.fill(m, 1000)
    peer = await h.RawPeer.connect(m.ha_addr)
    await peer.handshake()
    peer.send(ha_codec.encode_report(m.store.max_phy_offset + 100))
    frames = await peer.frames()
    assert frames and isinstance(frames[-1], ha_codec.ErrorFrame)
    assert frames[-1].code is ha_codec.ErrorCode.SLAVE_AHEAD_OF_MASTER_MAX
    assert frames[-1].master_max == m.store.max_phy_offset
    assert m.ha.push2slave_max_offset == 0


async def test_an_ack_beyond_the_master_max_closes_the_connection_and_never_counts(tmp_path, caplog):
    m = await h.master(tmp_path / "m")
    await h.fill(m, 5000)
    peer = await h.RawPeer.connect(m.ha_addr)
    await peer.handshake()
    peer.send(ha_codec.encode_report(0))
    await peer.frames(until_bytes=m.store.max_phy_offset)
    peer.send(ha_codec.encode_report(m.store.max_phy_offset + 10**9))
    assert await peer.closed_by_peer()
    assert m.ha.push2slave_max_offset == 0
    assert "beyond the master's max offset" in caplog.text
    assert (await h.put(m)).status is PutStatus.SLAVE_NOT_AVAILABLE


@pytest.mark.parametrize("impostor", ["bare-offsets", "wrong-broker-name", "wrong-cluster", "broker-id-0",
                                      "reports-instead-of-a-proof", "proof-of-another-secret", "replayed-proof",
                                      "master-proof-reflected", "silent-after-hello"])
async def test_an_impostor_is_refused_learns_no_offsets_and_never_counts_as_an_ack(tmp_path, impostor):
    m = await h.master(tmp_path / "m")
    await h.fill(m, 5000)
    if impostor == "replayed-proof":  # a real slave's exchange, captured, then replayed on a new connection
        real = await h.RawPeer.connect(m.ha_addr)
        await real.handshake(broker_id=1)
        captured = real.hello_raw, ha_handshake.slave_proof(h.SECRET.encode(), real.hello_raw,
                                                            real.last_challenge.nonce)
        real.close()
    peer = await h.RawPeer.connect(m.ha_addr)
    if impostor == "bare-offsets":
        peer.send(ha_codec.encode_report(10**12) * 5)  # what a RocketMQ 4.x slave / #3015 rogue peer sends
    elif impostor in ("wrong-broker-name", "wrong-cluster", "broker-id-0"):
        peer.hello(**{"wrong-broker-name": {"broker_name": "broker-x"}, "wrong-cluster": {"cluster": "Other"},
                      "broker-id-0": {"broker_id": 0}}[impostor])
        peer.send(ha_codec.encode_report(10**12))
    elif impostor == "reports-instead-of-a-proof":
        peer.hello()
        peer.send(ha_codec.encode_report(m.store.max_phy_offset) * 8)
    elif impostor == "proof-of-another-secret":
        await peer.handshake(secret="another-secret-0123456789")
        peer.send(ha_codec.encode_report(m.store.max_phy_offset))
    elif impostor == "replayed-proof":
        peer.send(captured[0])
        assert isinstance(await peer.next_frame(), ha_codec.Challenge)
        peer.send(captured[1] + ha_codec.encode_report(m.store.max_phy_offset))
    elif impostor == "master-proof-reflected":
        peer.hello()
        challenge = await peer.next_frame()
        peer.send(challenge.proof + ha_codec.encode_report(m.store.max_phy_offset))
    else:
        peer.hello()  # and then nothing: the handshake times out
    frames = await peer.frames(10)
    errors = [f for f in frames if isinstance(f, ha_codec.ErrorFrame)]
    assert not [f for f in frames if isinstance(f, ha_codec.Frame)], frames
    assert len(errors) == 1 and errors[0].code is ha_codec.ErrorCode.PEER_REFUSED, frames
    assert errors[0].master_min == errors[0].master_max == errors[0].phy_offset == -1  # no offsets leak
    assert "broker-a" not in errors[0].message and "TestCluster" not in errors[0].message
    assert m.ha.master.connected_slaves() == 0
    assert _local_addr(peer) not in [x.peer_addr for x in m.ha.status().slaves]  # a refused peer is never a row
    assert m.ha.push2slave_max_offset == 0
    assert (await h.put(m)).status is PutStatus.SLAVE_NOT_AVAILABLE
    peer.close()


async def test_a_slave_with_the_shared_secret_replicates_and_one_with_another_secret_is_refused(tmp_path, caplog):
    m = await h.master(tmp_path / "m")
    s = await h.slave(tmp_path / "s", m)
    other = await h.slave(tmp_path / "o", m, broker_id=2, ha_auth_secret="another-secret-0123456789")
    await connected(m)
    assert (await h.put(m)).status is PutStatus.PUT_OK
    # the master's proof does not match the other slave's secret: it refuses the master and never sends its own
    await async_wait_until(lambda: "its proof does not match this slave's HA secret" in caplog.text, 10,
                           "the slave with another secret distrusts the master")
    assert other.ha.slave.last_error.startswith(f"master {m.ha_addr} not trusted")
    assert [x.broker_id for x in m.ha.status().slaves] == [1]


@pytest.mark.parametrize("master_secret, slave_secret, expected", [
    (h.SECRET, "", "it authenticates its slaves and this slave has no HA secret"),
    ("", h.SECRET, "it authenticates nobody (no HA secret)"),
])
async def test_a_secret_on_one_side_only_is_refused_with_what_to_set(tmp_path, caplog, master_secret, slave_secret,
                                                                     expected):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER, ha_auth_secret=master_secret)
    s = await h.slave(tmp_path / "s", m, ha_auth_secret=slave_secret)
    await async_wait_until(lambda: expected in caplog.text, 10, f"the slave logs {expected!r}")
    await connected(m, 0)
    assert m.ha.push2slave_max_offset == 0 and not [x for x in m.ha.status().slaves if x.connected]


async def test_a_peer_posing_as_the_master_gets_no_proof_and_no_report_from_the_slave(tmp_path, caplog):
    got = bytearray()
    peer_closed = asyncio.Event()

    async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await ha_handshake.read_hello(reader)
        writer.write(ha_handshake.encode_challenge(os.urandom(32), os.urandom(32)))  # cannot compute the real proof
        got.extend(await reader.read(1 << 16))  # b"" once the slave closes
        peer_closed.set()
        writer.close()

    server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
    addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    s = await h.slave(tmp_path / "s", master_addr=addr)
    try:
        async with asyncio.timeout(10):
            await peer_closed.wait()
        assert bytes(got) == b"", "the slave sent a proof or a report to an impostor"
        assert "its proof does not match this slave's HA secret" in caplog.text
    finally:
        server.close()


async def test_a_second_authenticated_claim_of_a_live_broker_id_is_refused_and_counted_until_the_first_is_dead(
        tmp_path, caplog):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER, ha_housekeeping_interval=1500,
                       ha_send_heartbeat_interval=500)
    first = await h.RawPeer.connect(m.ha_addr)
    await first.handshake()
    first.send(ha_codec.encode_report(0))
    await connected(m)
    second = await h.RawPeer.connect(m.ha_addr)
    await second.handshake()  # it knows the secret
    second.send(ha_codec.encode_report(0))
    frames = await second.frames()
    assert isinstance(frames[-1], ha_codec.ErrorFrame) and frames[-1].master_max == -1, frames
    assert m.ha.counters.duplicate_claims == {1: 1} and m.ha.counters.replaced == 0
    assert m.ha.master.connections[1].link.slave_addr == _local_addr(first)
    assert "two live peers claim slave brokerId 1" in caplog.text
    # first now reads nothing: after haHousekeepingInterval its link is dead and a claimant gets the brokerId
    await async_wait_until(lambda: time.monotonic() - m.ha.master.links[1].last_read_mono >= 1.5, 10,
                           "the first link silent for haHousekeepingInterval")
    third = await h.RawPeer.connect(m.ha_addr)
    await third.handshake()
    third.send(ha_codec.encode_report(0))
    await async_wait_until(lambda: 1 in m.ha.master.connections and
                           m.ha.master.connections[1].link.slave_addr == _local_addr(third), 10, "third took over")
    assert await first.closed_by_peer()
    assert _duplicate_claims_series(m) == {"1": 1.0}


def _duplicate_claims_series(node: h.Node) -> dict[str, float]:
    """rocketmq_ha_duplicate_slave_claims_total by slave_broker_id, as a master's /metrics would show it."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from broker.metrics import BrokerMetrics
    from common.metrics import new_registry

    registry = new_registry()
    metrics = BrokerMetrics(registry, cluster=h.CLUSTER, broker_name=h.BROKER, broker_id=0, role="SYNC_MASTER")
    metrics.attach(ha=node.ha)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == "rocketmq_ha_duplicate_slave_claims_total":
                out[sample.labels["slave_broker_id"]] = sample.value
    return out


async def test_without_a_secret_a_second_claim_of_a_live_broker_id_is_refused_and_the_first_stays(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER, ha_auth_secret="")
    first = await h.RawPeer.connect(m.ha_addr)
    assert not (await first.handshake()).auth  # the unsafe master asks for no proof
    first.send(ha_codec.encode_report(0))
    await connected(m)
    second = await h.RawPeer.connect(m.ha_addr)
    second.hello()
    second.send(ha_codec.encode_report(0))
    frames = await second.frames()
    assert isinstance(frames[0], ha_codec.Challenge) and isinstance(frames[-1], ha_codec.ErrorFrame), frames
    assert frames[-1].master_max == -1
    assert m.ha.counters.replaced == 0
    assert m.ha.master.connections[1].link.slave_addr == _local_addr(first)
    first.close()


def _local_addr(peer: h.RawPeer) -> str:
    host, port = peer.writer.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


async def test_departed_slaves_leave_ha_status_after_the_keep_interval(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)  # haDisconnectedSlaveKeepInterval: 60 s
    gone = await h.RawPeer.connect(m.ha_addr)
    await gone.handshake(broker_id=1)
    gone.send(ha_codec.encode_report(0))
    await connected(m, 1)
    gone.close()
    await connected(m, 0)
    assert [(x.broker_id, x.state) for x in m.ha.status().slaves] == [(1, "DISCONNECTED")]
    closed = m.ha.master.links[1].closed_mono
    assert [lk.broker_id for lk in m.ha.master.visible_links(closed + 59.9)] == [1]
    assert m.ha.master.visible_links(closed + 60.0) == []
    live = await h.RawPeer.connect(m.ha_addr)
    await live.handshake(broker_id=2)
    live.send(ha_codec.encode_report(0))
    await connected(m, 1)
    assert [(x.broker_id, x.state) for x in m.ha.status().slaves] == [(2, "OK")]
    assert m.ha.master.visible_links(time.monotonic() + 10**6)[0].broker_id == 2  # a live slave never expires
    live.close()


async def test_handshakes_in_progress_are_bounded(tmp_path, monkeypatch):
    from broker.ha import master as master_mod

    monkeypatch.setattr(master_mod, "MAX_HANDSHAKES", 3)
    monkeypatch.setattr(master_mod, "MAX_HANDSHAKES_PER_HOST", 10)
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    silent = [await h.RawPeer.connect(m.ha_addr) for _ in range(3)]  # no hello (the conftest closes them)
    await async_wait_until(lambda: m.ha.master.handshakes_in_progress == 3, 5, "3 handshakes in progress")
    newcomer = await h.RawPeer.connect(m.ha_addr)
    assert await silent[0].closed_by_peer()  # the oldest silent one gave its slot to the newcomer
    assert m.ha.counters.handshakes_evicted == 1 and m.ha.master.handshakes_in_progress == 3
    newcomer.close()
    talkers = [await h.RawPeer.connect(m.ha_addr) for _ in range(3)]
    for peer in talkers:  # a hello and no proof: each holds its slot until the handshake's deadline
        peer.hello()
        assert isinstance(await peer.next_frame(), ha_codec.Challenge)
    refused = m.ha.counters.refused  # the silent ones may have missed their hello deadline by now
    extra = await h.RawPeer.connect(m.ha_addr)
    assert await extra.closed_by_peer()  # closed at once, without waiting for its hello
    assert m.ha.counters.refused == refused + 1
    await h.slave(tmp_path / "s", m)  # the real slave gets in once the talkers missed their deadline
    await async_wait_until(lambda: m.ha.master.connected_slaves() == 1, 20, "the slave connected")


async def test_silent_sockets_reopened_as_fast_as_they_close_do_not_lock_the_real_slave_out(tmp_path, caplog):
    from harness.ha_flood import SilentFlood

    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    hosts = tuple(f"127.0.0.{i}" for i in range(1, 21))  # the slave's own address among them
    async with SilentFlood(m.ha_addr, 100, hosts) as flood:
        s = await h.slave(tmp_path / "s", m)
        await async_wait_until(lambda: m.ha.master.connected_slaves() == 1, 15, "the slave connected despite 100 "
                               "silent sockets")
        await h.put(m, 5)
        await h.wait_caught_up(m, s)
        assert flood.open >= 50, "the flood kept its sockets open meanwhile"
    lines = [r for r in caplog.records if r.name == "broker.ha.master" and r.levelno >= logging.WARNING]
    assert len(lines) <= 20, f"{len(lines)} warning lines: refusals are not rate-limited"


@pytest.mark.parametrize("path", ["worker-thread-os-sendfile", "loop-sendfile"])
async def test_frames_never_cross_a_file_end_and_catch_up_uses_sendfile_at_nonzero_file_positions(tmp_path, path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    m.ha.master.policy.use_sendfile_thread = path == "worker-thread-os-sendfile"
    await h.fill(m, int(2.5 * MiB))
    total = m.store.max_phy_offset
    m.ha.master.policy.sendfile_min_lag = 64 * 1024  # treat this 2.5 MiB lag as a catch-up
    peer = await h.RawPeer.connect(m.ha_addr)
    await peer.handshake()
    peer.send(ha_codec.encode_report(0))
    frames = [f for f in await peer.frames(until_bytes=total) if isinstance(f, ha_codec.Frame) and f.body]
    expected = 0
    data = bytearray()
    for f in frames:
        assert f.phy_offset == expected
        assert len(f.body) <= 32 * 1024
        assert f.phy_offset // h.FILE_SIZE == (f.phy_offset + len(f.body) - 1) // h.FILE_SIZE, "crosses a file"
        expected += len(f.body)
        data += f.body
    assert expected == total
    # every file boundary starts a frame
    assert {f.phy_offset for f in frames} >= {MiB, 2 * MiB}
    # sendfile did the catch-up, including frames from the middle of a file
    assert m.ha.counters.sendfile_frames >= 40
    mid_file = [f for f in frames if f.phy_offset % h.FILE_SIZE]
    assert mid_file
    # and the bytes are the master's bytes, file position included
    on_disk = b"".join(p.read_bytes() for p in h.commitlog_files(m))
    assert bytes(data) == on_disk[:total]
    peer.close()


async def test_a_mismatching_header_offset_makes_the_slave_reconnect_from_its_own_max(tmp_path, caplog):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    s = await h.slave(tmp_path / "s", None, master_addr="")
    s.ha.update_master_address(m.ha_addr)
    await h.fill(m, 50_000)
    await h.wait_caught_up(m, s)
    await m.stop()
    local_max = s.store.max_phy_offset
    reports: list[int] = []
    hellos = 0

    async def fake_master(reader, writer):  # holds the secret: only its frame offsets are wrong
        nonlocal hellos
        hello = await ha_handshake.read_hello(reader)
        hellos += 1
        nonce = os.urandom(32)
        proof = ha_handshake.master_proof(h.SECRET.encode(), hello.raw, nonce)
        writer.write(ha_handshake.encode_challenge(nonce, proof))
        assert await ha_handshake.read_proof(reader) == ha_handshake.slave_proof(h.SECRET.encode(), hello.raw, nonce)
        reports.append(await ha_codec.read_report(reader))
        if hellos == 1:
            writer.write(ha_codec.encode_frame(local_max + 4096, b"x" * 100))
        await reader.read()  # until the slave closes
        writer.close()

    server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
    try:
        caplog.set_level(logging.INFO)
        s.ha.update_master_address(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await async_wait_until(lambda: hellos >= 2, 10, "the slave reconnected after the offset mismatch")
        assert reports[:2] == [local_max, local_max]
        assert f"master pushed offset {local_max + 4096}, slave max is {local_max}" in caplog.text
        assert s.store.max_phy_offset == local_max  # nothing appended
    finally:
        server.close()


async def test_ha_status_shows_a_disconnected_slave(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    s = await h.slave(tmp_path / "s", m)
    await connected(m)
    await h.put(m)
    await h.wait_caught_up(m, s)
    await s.stop()
    await connected(m, 0)
    [slave] = m.ha.status().slaves
    assert slave.state == "DISCONNECTED" and slave.broker_id == 1
    assert slave.ack_offset == m.store.max_phy_offset


async def test_a_restarted_slave_resumes_from_its_own_max(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    s = await h.slave(tmp_path / "s", m)
    await h.fill(m, 300_000)
    await h.wait_caught_up(m, s)
    resume_at = s.store.max_phy_offset
    await s.stop()
    await h.fill(m, 600_000)
    s = await h.Node(s.settings).start()
    await h.wait_caught_up(m, s)
    h.assert_commitlogs_identical(m, s)
    assert m.ha.status().slaves[0].transfer_from == resume_at


async def test_the_slave_reconnects_to_a_restarted_master_and_replication_goes_on(tmp_path):
    m = await h.master(tmp_path / "m")
    s = await h.slave(tmp_path / "s", m)
    await connected(m)
    assert (await h.put(m, 20)).status is PutStatus.PUT_OK
    await m.stop()
    m = await h.Node(m.settings).start()  # same directory, same HA port
    await connected(m)
    assert (await h.put(m, 20)).status is PutStatus.PUT_OK
    await h.wait_caught_up(m, s)
    h.assert_commitlogs_identical(m, s)
    assert s.ha.counters.reconnects >= 1


async def test_a_backlog_larger_than_the_receive_buffer_streams_by_sendfile_and_arrives_intact(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    await h.fill(m, 20 * MiB, batch=200, size=2000)
    s = await h.slave(tmp_path / "s", m)
    await h.wait_caught_up(m, s, timeout_s=60)
    h.assert_commitlogs_identical(m, s)
    assert h.cq_files(s) == h.cq_files(m)
    assert m.ha.counters.sendfile_frames > 100  # lag >= 16 MiB went through the worker-thread sendfile path


async def test_a_port_probe_that_sends_nothing_is_not_logged_as_a_refused_peer(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    probe = await h.RawPeer.connect(m.ha_addr)
    probe.close()
    peer = await h.RawPeer.connect(m.ha_addr)
    peer.send(b"GET / HTTP/1.1\r\n\r\n" + b"x" * 16)
    assert await peer.closed_by_peer()
    assert m.ha.counters.refused == 1  # the HTTP client, not the silent probe


async def test_a_slave_refused_at_every_retry_logs_each_kind_of_line_at_most_once_per_interval(tmp_path, caplog,
                                                                                               monkeypatch):
    from broker.ha import slave as slave_mod

    monkeypatch.setattr(slave_mod, "LOG_EVERY_S", 3600.0)  # one interval spans the whole test
    caplog.set_level(logging.INFO, logger="broker.ha.slave")

    async def refuse(reader, writer):  # a master whose slots are taken: closed at once, or refused after the hello
        refuse.n += 1
        if refuse.n % 2:
            await reader.read(100)
            writer.write(ha_codec.encode_error(ha_codec.ErrorCode.PEER_REFUSED, "refused"))
        writer.close()

    refuse.n = 0
    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    try:
        s = await h.slave(tmp_path / "s", master_addr=f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await async_wait_until(lambda: s.ha.counters.reconnects >= 4, 30, "four refused attempts")
    finally:
        server.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "broker.ha.slave"]
    assert sum("refused replication" in x for x in lines) == 1, lines
    assert sum("closed:" in x for x in lines) == 1, lines
