"""The confirm offset with real processes (allAckInSyncStateSet=true): a consumer pulling from the master sees a
message only once every SyncStateSet member holds it (or the set shrank without the one that lacks it), a held pull
wakes when the confirm offset covers its message, and a failover right after unconfirmed sends never leaves a
consumer with a message the new master lacks (judged by ``harness.checker``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from client import AdminClient, Producer, SendStatus
from harness.checker import Mode, Read, check
from harness.controller_mode import group_of_three, replica_info, sync_state_set_is
from harness.procs import Broker
from harness.waiting import async_wait_until
from remoting.codes import ResponseCode
from tests.integration.broker.rpc import FLAG_SUBSCRIPTION, FLAG_SUSPEND, BrokerClient, group_config, message
from tests.integration.controller_mode.test_failover import TOPIC as FAILOVER_TOPIC
from tests.integration.controller_mode.test_failover import History, drain

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "ConfirmTopic"
GROUP = "broker-c"
CONSUMERS = "confirm-readers"
V2_CLIENT = [("x-mq-client-id", "pytest@confirm-offset")]


async def bodies(client: BrokerClient, offset: int, **kw) -> tuple[int, list[bytes]]:
    got = await client.pull(CONSUMERS, TOPIC, 0, offset, **kw)
    return got.code, [m.body for m in got.messages]


@asynccontextmanager
async def one_confirmed_message(tmp_path, cns) -> AsyncIterator[tuple[list[Broker], BrokerClient, BrokerClient]]:
    """The group (slaveTimeout 1 s; haMaxTimeSlaveNotCatchup 60 s keeps a frozen member in the set for the whole
    test) with broker 1 master, TOPIC created and one message, ``confirmed``, sent to every member: the brokers
    and clients of broker 1 and of broker 2."""
    async with group_of_three(tmp_path, cns, GROUP, slaveTimeout=1000, haMaxTimeSlaveNotCatchup=60_000) as brokers:
        master, member = BrokerClient(brokers[0].addr), BrokerClient(brokers[1].addr)
        try:
            assert (await replica_info(cns, GROUP)).master_broker_id == 1
            assert (await master.create_topic(TOPIC, queues=1)).code == ResponseCode.SUCCESS
            assert (await master.send(TOPIC, 0, [message(b"confirmed")])).code == ResponseCode.SUCCESS
            yield brokers, master, member
        finally:
            await member.close()
            await master.close()


async def test_a_message_is_visible_only_once_every_member_holds_it(tmp_path, cns):
    async with one_confirmed_message(tmp_path, cns) as (brokers, client, slave):
        assert await bodies(client, 0) == (ResponseCode.SUCCESS, [b"confirmed"])

        async def slave_serves(*want: bytes):
            async def check() -> bool:
                return await bodies(slave, 0) == (ResponseCode.SUCCESS, list(want))
            return check

        # the slave learns the master's confirm offset through the controller (a heartbeat round or two)
        await async_wait_until(await slave_serves(b"confirmed"), 10, "the slave serves the confirmed message")

        brokers[2].pause()
        late = await client.send(TOPIC, 0, [message(b"pending")])
        assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (late.code, late.remark)
        code, seen = await bodies(client, 1)
        assert code == ResponseCode.PULL_NOT_FOUND and seen == [], (code, seen)
        code, seen = await bodies(client, 0)
        assert seen == [b"confirmed"], seen  # the queue ends, for consumers, before the pending message
        # slave 2 holds the pending message (it acked it) but must not serve it either; two rounds pass meanwhile
        for _ in range(3):
            assert await bodies(slave, 0) == (ResponseCode.SUCCESS, [b"confirmed"])
            await asyncio.sleep(1)  # not a pass/fail timing: gives the slave's rounds a chance to get it wrong

        # a held pull (long polling) is answered with the message once the frozen member acked it
        held = asyncio.ensure_future(
            bodies(client, 1, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION, suspend_ms=30_000, timeout=40))
        await asyncio.sleep(0)
        assert not held.done()
        brokers[2].resume()
        assert await asyncio.wait_for(held, 40) == (ResponseCode.SUCCESS, [b"pending"])
        await async_wait_until(await slave_serves(b"confirmed", b"pending"), 10,
                               "the slave serves it once confirmed")


async def test_a_message_becomes_visible_when_the_set_shrinks_without_the_member_lacking_it(tmp_path, cns):
    async with group_of_three(tmp_path, cns, GROUP, slaveTimeout=1000, haMaxTimeSlaveNotCatchup=5000) as brokers:
        client = BrokerClient(brokers[0].addr)
        try:
            assert (await client.create_topic(TOPIC, queues=1)).code == ResponseCode.SUCCESS
            brokers[2].pause()
            late = await client.send(TOPIC, 0, [message(b"pending")])
            assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (late.code, late.remark)
            assert await bodies(client, 0) == (ResponseCode.PULL_NOT_FOUND, [])
            await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2}), 20, "the lagging member leaves the set")

            async def visible() -> bool:
                return await bodies(client, 0) == (ResponseCode.SUCCESS, [b"pending"])

            await async_wait_until(visible, 10, "the message is visible once the set holds it")
        finally:
            await client.close()


async def test_after_a_failover_no_consumer_has_seen_a_message_the_new_master_lacks(tmp_path, cns):
    group = "broker-a"  # test_failover's History and drain work on its topic in this group
    async with group_of_three(tmp_path, cns, group, haMaxTimeSlaveNotCatchup=60_000,
                              maxMessageSize=1024 * 1024) as brokers:
        admin = await AdminClient(cns.addr).start()
        producer = await Producer("confirm-producer", cns.addr, send_timeout_s=8.0).start()
        reader = BrokerClient(brokers[0].addr)
        try:
            await admin.update_topic(brokers[0].addr, FAILOVER_TOPIC, read_queue_nums=1, write_queue_nums=1)
            history = History(producer)
            for i in range(20):
                assert await history.send(f"before-{i}") is SendStatus.SEND_OK

            # both slaves frozen: the master stores these sends but nobody else holds all of them (more than the
            # frozen slaves' socket buffers take)
            for b in brokers[1:]:
                b.pause()
            statuses = await asyncio.gather(*(history.send(f"unconfirmed-{i}", b"u" * 600_000) for i in range(30)))
            assert SendStatus.SEND_OK not in statuses, statuses

            # what a consumer reading the master right now gets
            early: list[Read] = []
            offset = 0
            while True:
                got = await reader.pull("confirm-early", FAILOVER_TOPIC, 0, offset, max_msg_bytes=64 * 1024 * 1024)
                if got.code != ResponseCode.SUCCESS:
                    break
                early += [Read(m.body.split(b"|", 1)[0].decode(), f"{FAILOVER_TOPIC}:0", m.queue_offset)
                          for m in got.messages]
                offset = got.next_begin_offset

            brokers[0].kill()
            for b in brokers[1:]:
                b.resume()

            async def send_ok() -> bool:
                return await history.send(f"after-kill-{len(history.sends)}") is SendStatus.SEND_OK

            await async_wait_until(send_ok, 30, "a SEND_OK from the new master", 0.05)
            for i in range(40):
                await history.send(f"later-{i}")
            info = await replica_info(cns, group)
            assert info.master_broker_id in (2, 3), info
            # the early reads and a drain of the new master must agree on every queue offset
            report = check(history.sends, early + await drain(cns, 1))
            assert not report.problems(Mode.SYNC), (report.problems(Mode.SYNC), report.figures())
            assert report.inconsistent_offsets == []
            assert [r.id for r in early] == [f"before-{i}" for i in range(20)], [r.id for r in early][:25]
        finally:
            await reader.close()
            await producer.stop()
            await admin.stop()


async def test_a_v2_receive_gets_a_message_only_once_every_member_holds_it(tmp_path, cns):
    consumers = "confirm-v2"

    async def receive(stub, wait_s: int) -> list[bytes]:
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name=consumers), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=8,
            invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=wait_s))
        answers = [r async for r in stub.ReceiveMessage(req, metadata=V2_CLIENT, timeout=wait_s + 20)]
        return [r.message.body for r in answers if r.HasField("message")]

    async with group_of_three(tmp_path, cns, GROUP, slaveTimeout=1000, haMaxTimeSlaveNotCatchup=60_000) as brokers:
        client = BrokerClient(brokers[0].addr)
        try:
            assert (await client.create_topic(TOPIC, queues=1)).code == ResponseCode.SUCCESS
            assert (await client.create_group(group_config(consumers))).code == ResponseCode.SUCCESS
            brokers[2].pause()
            late = await client.send(TOPIC, 0, [message(b"pending")])
            assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (late.code, late.remark)
            async with grpc.aio.insecure_channel(brokers[0].grpc_addr) as channel:
                stub = sgrpc.MessagingServiceStub(channel)
                assert await receive(stub, 0) == []
                held = asyncio.ensure_future(receive(stub, 20))
                await asyncio.sleep(0)
                assert not held.done()
                brokers[2].resume()
                assert await asyncio.wait_for(held, 40) == [b"pending"]
        finally:
            await client.close()


async def test_a_new_master_shows_what_it_held_at_takeover_at_once_and_gates_what_comes_after(tmp_path, cns):
    """The elected member's confirm limit starts at its store end (``replicas_manager``: the new SyncStateSet is that
    member alone, so everything it holds is on every member), before any new send moves it; later records wait for
    the new set as on any master."""
    async with one_confirmed_message(tmp_path, cns) as (brokers, client, new):
        brokers[2].pause()
        late = await client.send(TOPIC, 0, [message(b"held-by-2")])  # broker 2 acked it, broker 3 could not
        assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (late.code, late.remark)
        assert await bodies(new, 0) == (ResponseCode.SUCCESS, [b"confirmed"])  # as a slave it hides it

        brokers[0].kill()

        async def elected() -> bool:
            info = await replica_info(cns, GROUP)
            return info.master_broker_id == 2 and info.sync_state_set == {2}

        await async_wait_until(elected, 30, "broker 2 (the longest log) elected alone in the set", 0.05)

        async def serves_as_master() -> bool:
            try:  # the switch restarts its server; GET_MAX_OFFSET answers from the store either way
                return (await new.create_topic("TakeoverProbe", queues=1)).code == ResponseCode.SUCCESS
            except Exception:  # noqa: BLE001 - the connection closed by the switch
                return False

        await async_wait_until(serves_as_master, 30, "broker 2 serving as master", 0.05)
        # no send since the takeover: what it held is visible at once, both messages
        assert await bodies(new, 0) == (ResponseCode.SUCCESS, [b"confirmed", b"held-by-2"])

        brokers[2].resume()
        await async_wait_until(sync_state_set_is(cns, GROUP, {2, 3}), 40, "broker 3 rejoins the new master's set")
        brokers[2].pause()
        after = await new.send(TOPIC, 0, [message(b"after")])
        assert after.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (after.code, after.remark)
        assert await bodies(new, 2) == (ResponseCode.PULL_NOT_FOUND, [])  # gated: broker 3 lacks it
        brokers[2].resume()

        async def visible() -> bool:
            return await bodies(new, 2) == (ResponseCode.SUCCESS, [b"after"])

        await async_wait_until(visible, 20, "the later message visible once broker 3 holds it")
