"""The v2 endpoint's SendMessage stores plain and FIFO messages with ``MessageStore.put_grouped``: concurrent calls
share appends and waits (SYNC_FLUSH here, so every put waits and groups form), and each call is answered with its
own message's queue offset, where that message is stored; calls whose clients gave up cost the others nothing."""

from __future__ import annotations

import asyncio
import uuid
import zlib

import grpc
import pytest

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from remoting.codes import ResponseCode
from remoting.message_codec import PROPERTY_UNIQ_KEY
from tests.brokers import broker_fixture
from tests.integration.broker.rpc import BrokerClient

pytestmark = pytest.mark.integration

TOPIC = "V2GroupedSends"
QUEUES = 4
GROUP = "order-7"
CLIENT_ID = [("x-mq-client-id", "pytest@v2-grouped")]


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-v2-grouped", flushDiskType="SYNC_FLUSH")


@pytest.fixture(scope="module", autouse=True)
def topic(master):
    async def create() -> int:
        async with BrokerClient(master.addr) as client:
            return (await client.create_topic(TOPIC, QUEUES)).code

    assert asyncio.run(create()) == ResponseCode.SUCCESS


def request(body: bytes, group: str | None) -> tuple[str, spb.SendMessageRequest]:
    mid = uuid.uuid4().hex.upper()
    sp = pb.SystemProperties(message_id=mid, body_encoding=pb.Encoding.IDENTITY,
                             message_type=pb.MessageType.FIFO if group else pb.MessageType.NORMAL)
    if group:
        sp.message_group = group
    return mid, spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=TOPIC), body=body,
                                                            system_properties=sp)])


async def stored_ids(master, queue_id: int) -> dict[int, str]:
    async with BrokerClient(master.addr) as client:
        return {m.queue_offset: m.properties[PROPERTY_UNIQ_KEY]
                for m in await client.pull_all("v2-grouped-check", TOPIC, queue_id)}


async def test_concurrent_sends_are_each_answered_with_their_own_offset(master):
    fifo_queue = zlib.crc32(GROUP.encode()) % QUEUES
    async with grpc.aio.insecure_channel(master.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        sent = [request(f"m{i}".encode(), GROUP if i % 2 else None) for i in range(128)]
        answers = await asyncio.gather(*(stub.SendMessage(r, metadata=CLIENT_ID, timeout=10) for _, r in sent))
    assert all(a.status.code == pb.Code.OK for a in answers), [a.status for a in answers if a.status.code != pb.Code.OK]
    assert [a.entries[0].message_id for a in answers] == [mid for mid, _ in sent]
    fifo = [(a.entries[0].offset, mid) for (mid, _), a, i in zip(sent, answers, range(128)) if i % 2]
    assert len({offset for offset, _ in fifo}) == 64  # one offset each, none shared
    queues = [await stored_ids(master, q) for q in range(QUEUES)]
    assert all(queues[fifo_queue].get(offset) == mid for offset, mid in fifo), "a FIFO answer names another's offset"
    for (mid, _), a, i in zip(sent, answers, range(128)):
        if i % 2 == 0:  # a plain message is where its answer says, in one of the queues
            found = [q for q in range(QUEUES) if queues[q].get(a.entries[0].offset) == mid]
            assert len(found) == 1, f"plain message {mid} not at offset {a.entries[0].offset} of any queue"


async def test_calls_cancelled_by_their_clients_leave_the_others_answered(master):
    async with grpc.aio.insecure_channel(master.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        sent = [request(f"c{i}".encode(), GROUP) for i in range(64)]
        calls = [stub.SendMessage(r, metadata=CLIENT_ID, timeout=10) for _, r in sent]
        for call in calls[::2]:
            call.cancel()
        kept = await asyncio.gather(*calls[1::2])
        assert all(a.status.code == pb.Code.OK for a in kept), [a.status for a in kept]
        offsets = [a.entries[0].offset for a in kept]
        assert len(set(offsets)) == len(offsets)
        after = await stub.SendMessage(request(b"after", GROUP)[1], metadata=CLIENT_ID, timeout=10)
        assert after.status.code == pb.Code.OK and after.entries[0].offset > max(offsets)
    stored = await stored_ids(master, zlib.crc32(GROUP.encode()) % QUEUES)
    assert all(stored.get(a.entries[0].offset) == mid for (mid, _), a in zip(sent[1::2], kept))
    log = master.log_tail(400)
    assert "callback failed" not in log and "InvalidStateError" not in log, log
