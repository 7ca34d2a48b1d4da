"""A broker's memory is bounded against peers that hold it on purpose (issue 22, items 3 and 9): on the listen
port, half-sent large frames kept alive by a trickle are refused past ``serverMaxHeldBytes`` and closed
``serverFrameTimeoutMillis`` after their first byte; on the v2 endpoint, trickled messages and a rapid-reset flood
end with the connection's GOAWAY (``grpcMaxConnectionAgeMillis``) and streams are bounded per connection. A normal
client is served throughout."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from harness.h2_raw import RawH2
from harness.memory_attacks import MIB, PartialFrames, RssPeak
from harness.metrics_page import sample_value
from harness.procs import Broker
from harness.waiting import async_wait_until, wait_until
from tests.integration.broker.rpc import BrokerClient, message
from remoting.codes import ResponseCode

pytestmark = pytest.mark.integration

CAP = 48 * MIB
FRAME_TIMEOUT_MS = 3000
GRPC_AGE_MS = 4000
SLACK = 40 * MIB  # the interpreter's own growth under load: buffers of reads, answers, allocator arenas
CLIENT_ID = [("x-mq-client-id", "pytest@held-bytes")]
TOPIC = "HeldBytesTopic"


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    with Broker(tmp_path_factory.mktemp("held-bytes"), name="broker-held-bytes", namesrv_addr=namesrv.addr,
                serverMaxHeldBytes=CAP, serverFrameTimeoutMillis=FRAME_TIMEOUT_MS,
                grpcMaxConnectionAgeMillis=GRPC_AGE_MS, grpcMaxConcurrentStreams=64) as broker:
        yield broker


@pytest.fixture(scope="module", autouse=True)
def topic(master):
    async def create() -> int:
        async with BrokerClient(master.addr) as client:
            return (await client.create_topic(TOPIC)).code

    assert asyncio.run(create()) == ResponseCode.SUCCESS
    return TOPIC


@pytest.fixture(scope="module")
def stub(master):
    channel = grpc.insecure_channel(master.grpc_addr)
    yield sgrpc.MessagingServiceStub(channel)
    channel.close()


def route_answers(stub) -> bool:
    answer = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=CLIENT_ID, timeout=5)
    return answer.status.code == pb.Code.OK and len(answer.message_queues) > 0


async def test_half_sent_frames_on_the_listen_port_are_capped_and_closed_by_the_frame_deadline(master):
    async with BrokerClient(master.addr) as client:
        rss = RssPeak(master.pid)
        attack = PartialFrames(master.addr, 32, frame=8 * MIB, sent=4 * MIB, trickle_s=0.5).start()
        try:
            for i in range(5):  # sends are stored while the attack runs
                sent = await client.send(TOPIC, 0, [message(f"during the attack {i}".encode())])
                assert sent.code == ResponseCode.SUCCESS, sent.remark
            await async_wait_until(lambda: attack.closed == attack.connections, FRAME_TIMEOUT_MS / 1000 + 10,
                                   lambda: f"{attack.closed} of {attack.connections} trickling peers closed:\n"
                                           f"{master.log_tail()}")
        finally:
            attack.stop()
            rss.stop()
    assert rss.growth < CAP + SLACK, f"RSS grew {rss.growth / MIB:.0f} MiB, cap {CAP / MIB:.0f} MiB"
    refused = sample_value(master.metrics_port, "rocketmq_remoting_connections_closed_total", reason="frame_refused")
    timed_out = sample_value(master.metrics_port, "rocketmq_remoting_connections_closed_total", reason="frame_timeout")
    assert refused >= 1 and timed_out >= 1, (refused, timed_out)
    assert sample_value(master.metrics_port, "rocketmq_remoting_held_bytes_limit") == CAP
    await async_wait_until(
        lambda: sample_value(master.metrics_port, "rocketmq_remoting_held_bytes") < 64 * 1024, 5,
        "held bytes did not return after the attack")


def test_trickled_v2_messages_end_with_the_connection_age(master, stub):
    wait_until(lambda: route_answers(stub), 10, "the topic has no v2 route")
    rss = RssPeak(master.pid)
    peers = [RawH2(master.grpc_addr) for _ in range(4)]
    try:
        streams = [(peer, peer.partial_message(4 * MIB, MIB)) for peer in peers for _ in range(4)]
        started = time.monotonic()

        def trickled_until_ended() -> bool:
            for peer, stream in streams:
                peer.trickle(stream)
            return all(peer.ended for peer in peers)

        wait_until(trickled_until_ended, GRPC_AGE_MS / 1000 + 10, "the trickling v2 peers were never asked to go",
                   interval_s=0.5)
        assert time.monotonic() - started < GRPC_AGE_MS / 1000 + 5
        assert route_answers(stub)  # a normal client is served, and kept
    finally:
        for peer in peers:
            peer.close()
        rss.stop()
    assert rss.growth < 16 * MIB + SLACK, f"RSS grew {rss.growth / MIB:.0f} MiB for 16 MiB of partial messages"


def test_a_rapid_reset_flood_on_v2_is_ended_and_its_memory_bounded(master, stub):
    wait_until(lambda: route_answers(stub), 10, "the topic has no v2 route")
    rss = RssPeak(master.pid)
    peers = [RawH2(master.grpc_addr) for _ in range(4)]
    resets = 0
    try:
        deadline = time.monotonic() + GRPC_AGE_MS / 1000 + 10
        while not all(peer.ended for peer in peers) and time.monotonic() < deadline:
            for peer in peers:
                if not peer.ended and peer.rapid_resets(1000):
                    resets += 1000
        assert all(peer.goaway is not None or peer.eof is not None for peer in peers), \
            f"the flooding connections were never ended ({resets} streams reset)"
        assert route_answers(stub)
    finally:
        for peer in peers:
            peer.close()
        rss.stop()
    assert resets > 10_000
    assert rss.growth < SLACK, f"RSS grew {rss.growth / MIB:.0f} MiB during {resets} rapid resets"
