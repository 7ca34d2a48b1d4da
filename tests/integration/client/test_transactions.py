"""Transactional messages end to end against a real broker process: the SDK's TransactionProducer, RocketMQ's
END_TRANSACTION (37) and the broker's CHECK_TRANSACTION_STATE (39) (spec controller-and-features.md §2.1)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from client import Message
from client.transaction_producer import LocalTransactionState, TransactionProducer, end_header
from harness.metrics_page import first_sample
from harness.procs import Broker
from remoting.codes import RequestCode, ResponseCode
from tests.brokers import broker_fixture, master_and_slave
from tests.integration.broker.rpc import BrokerClient, message
from tests.integration.client.conftest import create_topic, unique, wait_for

pytestmark = pytest.mark.integration

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
TX_CONF = {"transactionTimeOut": 800, "transactionCheckInterval": 200, "transactionCheckMax": 3,
           "flushConsumerOffsetInterval": 200}


@pytest.fixture(scope="module")
def broker(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-tx", **TX_CONF)


async def bodies_in(broker: Broker, topic: str, queues: int = 4) -> list[bytes]:
    async with BrokerClient(broker.addr) as c:
        out = []
        for q in range(queues):
            out += [m.body for m in await c.pull_all("tx-reader", topic, q)]
        return out


async def half_offset(broker: Broker) -> int:
    async with BrokerClient(broker.addr) as c:
        _, offset = await c.query_offset("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0)
        return offset or 0


async def half_count(broker: Broker) -> int:
    async with BrokerClient(broker.addr) as c:
        return len(await c.pull_all("tx-reader", "RMQ_SYS_TRANS_HALF_TOPIC", 0))


async def settled(broker: Broker) -> None:
    """Every half copy stored so far is closed and the check service moved the system group past it."""
    async def done() -> bool:
        return await half_offset(broker) >= await half_count(broker)

    await wait_for(done, 15.0, "the check service to pass every resolved half")


async def metric(broker: Broker, name: str, **labels: str) -> float:
    value = await asyncio.to_thread(first_sample, broker.metrics_port, name, timeout_s=5, **labels)
    if value is None:
        raise AssertionError(f"{name} {labels} not exported")
    return value


def tx_producer(namesrv, group: str, **kw) -> TransactionProducer:
    return TransactionProducer(group, namesrv.addr, send_timeout_s=3.0, heartbeat_interval_s=1.0, **kw)


async def test_commit_delivers_once_and_rollback_never(namesrv, admin, broker):
    topic = unique("TxTopic")
    await create_topic(admin, broker, topic)
    commits, rollbacks = (await metric(broker, "rocketmq_commit_messages_total"),
                          await metric(broker, "rocketmq_rollback_messages_total"))
    async with tx_producer(namesrv, unique("pg")) as p:
        committed = await p.send_message_in_transaction(Message(topic, b"commit-me"), lambda m, a: COMMIT)
        rolled = await p.send_message_in_transaction(Message(topic, b"roll-me"), lambda m, a: ROLLBACK)
        assert committed.state is COMMIT and rolled.state is ROLLBACK
        assert committed.send_result.message_queue.topic == topic

        async def delivered() -> bool:
            return await bodies_in(broker, topic) == [b"commit-me"]

        await wait_for(delivered, 10.0, "the committed message")
        await settled(broker)
        assert await bodies_in(broker, topic) == [b"commit-me"]
        assert p.checks_answered == 0
    assert await metric(broker, "rocketmq_commit_messages_total") == commits + 1
    assert await metric(broker, "rocketmq_rollback_messages_total") == rollbacks + 1


async def test_a_producer_that_crashed_between_half_and_commit_is_checked_and_its_commit_delivers_once(
        namesrv, admin, broker):
    topic, group = unique("TxCrash"), unique("pg-crash")
    await create_topic(admin, broker, topic)
    crashed = await tx_producer(namesrv, group).start()
    await crashed.send_half(Message(topic, b"orphan"))
    await crashed.remoting.close()  # gone without END_TRANSACTION or UNREGISTER_CLIENT
    asked: list[bytes] = []

    def checker(msg) -> LocalTransactionState:
        asked.append(msg.body)
        assert msg.topic == topic
        return COMMIT

    async with tx_producer(namesrv, group, checker=checker, topics=(topic,)) as p:
        async def delivered() -> bool:
            return await bodies_in(broker, topic) == [b"orphan"]

        await wait_for(delivered, 15.0, "the check's commit")
        await settled(broker)
        assert await bodies_in(broker, topic) == [b"orphan"]
        assert asked[0] == b"orphan" and p.checks_answered >= 1
    assert await metric(broker, "rocketmq_transaction_checks_total", outcome="sent") >= 1


async def test_a_half_checked_transactionCheckMax_times_moves_to_TRANS_CHECK_MAX_TIME_TOPIC(namesrv, admin, broker):
    topic = unique("TxMax")
    await create_topic(admin, broker, topic)
    before = len(await bodies_in(broker, "TRANS_CHECK_MAX_TIME_TOPIC", 1))
    async with tx_producer(namesrv, unique("pg-max"), checker=lambda m: UNKNOW) as p:
        await p.send_message_in_transaction(Message(topic, b"undecided"), lambda m, a: UNKNOW)

        async def moved() -> bool:
            return len(await bodies_in(broker, "TRANS_CHECK_MAX_TIME_TOPIC", 1)) > before

        await wait_for(moved, 20.0, "the half to reach TRANS_CHECK_MAX_TIME_TOPIC")
        assert (await bodies_in(broker, "TRANS_CHECK_MAX_TIME_TOPIC", 1))[-1] == b"undecided"
        assert p.checks_answered == TX_CONF["transactionCheckMax"]
        assert await metric(broker, "rocketmq_transaction_checks_total", outcome="discarded") >= 1
        await settled(broker)
        assert await bodies_in(broker, topic) == []
        assert await metric(broker, "rocketmq_half_messages") == 0


async def test_end_transaction_bad_inputs_get_specific_codes(namesrv, admin, broker):
    topic, group = unique("TxBad"), unique("pg-bad")
    await create_topic(admin, broker, topic)
    async with tx_producer(namesrv, group) as p, BrokerClient(broker.addr) as c:
        half = await p.send_half(Message(topic, b"half"))
        plain = await c.send(topic, 0, [message(b"plain")])
        assert plain.code == ResponseCode.SUCCESS

        async def end(result_offset_id: str, queue_offset: int, state=COMMIT, pgroup: str = group) -> tuple[int, str]:
            ext = end_header(pgroup, queue_offset, result_offset_id, state, half.msg_id, False)
            resp = await c.request(RequestCode.END_TRANSACTION, ext)
            return resp.code, resp.remark or ""

        code, remark = await end(plain.msg_ids[0], plain.queue_offset)
        assert code == ResponseCode.INVALID_PARAMETER and "not a half message" in remark
        code, remark = await end(half.offset_msg_id[:16] + "%016X" % (plain.physical_offset + 3), 0)
        assert code == ResponseCode.INVALID_PARAMETER and "no message record starts there" in remark
        code, remark = await end(half.offset_msg_id, half.queue_offset, pgroup="someone-else")
        assert code == ResponseCode.NO_PERMISSION and "producer group" in remark
        code, remark = await end(half.offset_msg_id, half.queue_offset + 1)
        assert code == ResponseCode.INVALID_PARAMETER and "table offset" in remark
        assert await bodies_in(broker, topic) == [b"plain"]  # nothing committed by a bad request

        assert await end(half.offset_msg_id, half.queue_offset) == (ResponseCode.SUCCESS, "")
        code, remark = await end(half.offset_msg_id, half.queue_offset)  # twice
        assert code == ResponseCode.SYSTEM_ERROR and "already resolved (commit)" in remark
        code, remark = await end(half.offset_msg_id, half.queue_offset, ROLLBACK)
        assert code == ResponseCode.SYSTEM_ERROR and "already resolved (commit)" in remark
        assert sorted(await bodies_in(broker, topic)) == [b"half", b"plain"]


async def test_a_batch_with_a_half_message_is_refused(namesrv, admin, broker):
    topic = unique("TxBatch")
    await create_topic(admin, broker, topic)
    async with BrokerClient(broker.addr) as c:
        resp = await c.send(topic, 0, [message(b"a", TRAN_MSG="true", PGROUP="g"), message(b"b")])
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "transaction" in resp.remark
    assert await bodies_in(broker, topic) == []


@pytest.mark.parametrize("bounce", ["clean", "hard"])
async def test_a_master_restart_between_half_and_commit_keeps_the_transaction(tmp_path, namesrv, admin, bounce):
    with Broker(tmp_path / "b", name=f"broker-txr-{bounce}", namesrv_addr=namesrv.addr, **TX_CONF) as broker:
        topic, group = unique("TxRestart"), unique("pg-restart")
        await create_topic(admin, broker, topic)
        p = await tx_producer(namesrv, group).start()
        try:
            first = await p.send_half(Message(topic, b"before-restart"))
            second = await p.send_half(Message(topic, b"rolled-back"))
            if bounce == "clean":
                assert broker.stop() == 0
            else:
                broker.kill()
            broker.start()

            async def ended(result, state) -> bool:
                async with BrokerClient(broker.addr) as c:
                    ext = end_header(group, result.queue_offset, result.offset_msg_id, state, result.msg_id, False)
                    resp = await c.request(RequestCode.END_TRANSACTION, ext)
                    return resp.code == ResponseCode.SUCCESS

            assert await ended(first, COMMIT)
            assert await ended(second, ROLLBACK)
            assert await bodies_in(broker, topic) == [b"before-restart"]
            await settled(broker)
            assert broker.stop() == 0  # and again: the resolution is records too
            broker.start()
            async with BrokerClient(broker.addr) as c:
                ext = end_header(group, first.queue_offset, first.offset_msg_id, COMMIT, first.msg_id, False)
                resp = await c.request(RequestCode.END_TRANSACTION, ext)
                assert resp.code in (ResponseCode.SYSTEM_ERROR, ResponseCode.QUERY_NOT_FOUND)
            assert await bodies_in(broker, topic) == [b"before-restart"]
        finally:
            await p.stop()


# -- the v2 endpoint ------------------------------------------------------------------------------------------------
V2_CLIENT = [("x-mq-client-id", "pytest@tx-v2")]


def v2_half(topic: str, body: bytes, message_id: str) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
        message_id=message_id, message_type=pb.MessageType.TRANSACTION, body_encoding=pb.Encoding.IDENTITY))


async def test_v2_transaction_commit_rollback_and_bad_end_transaction(namesrv, admin, broker):
    topic = unique("TxV2")
    await create_topic(admin, broker, topic)
    async with grpc.aio.insecure_channel(broker.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)

        async def send(body: bytes, message_id: str) -> spb.SendResultEntry:
            answer = await stub.SendMessage(spb.SendMessageRequest(messages=[v2_half(topic, body, message_id)]),
                                            metadata=V2_CLIENT, timeout=5)
            assert answer.status.code == pb.Code.OK, answer.status
            return answer.entries[0]

        async def end(entry, resolution) -> pb.Status:
            req = spb.EndTransactionRequest(topic=pb.Resource(name=topic), message_id=entry.message_id,
                                            transaction_id=entry.transaction_id, resolution=resolution,
                                            source=pb.TransactionSource.SOURCE_CLIENT)
            return (await stub.EndTransaction(req, metadata=V2_CLIENT, timeout=5)).status

        commit, rollback = await send(b"v2-commit", "01TXV2COMMIT"), await send(b"v2-rollback", "01TXV2ROLLBACK")
        assert commit.transaction_id and await bodies_in(broker, topic) == []
        assert (await end(commit, pb.TransactionResolution.COMMIT)).code == pb.Code.OK
        assert (await end(rollback, pb.TransactionResolution.ROLLBACK)).code == pb.Code.OK
        again = await end(commit, pb.TransactionResolution.COMMIT)
        assert again.code != pb.Code.OK and "already resolved (commit)" in again.message
        bad = spb.EndTransactionRequest(topic=pb.Resource(name=topic), transaction_id="nonsense",
                                        resolution=pb.TransactionResolution.COMMIT)
        assert (await stub.EndTransaction(bad, metadata=V2_CLIENT, timeout=5)).status.code == \
            pb.Code.INVALID_TRANSACTION_ID
        assert await bodies_in(broker, topic) == [b"v2-commit"]


async def test_v2_check_arrives_on_the_telemetry_stream_and_its_commit_delivers_once(namesrv, admin, broker):
    topic = unique("TxV2Check")
    await create_topic(admin, broker, topic)
    async with grpc.aio.insecure_channel(broker.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        stream = stub.Telemetry(metadata=V2_CLIENT)
        await stream.write(spb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)]))))
        assert (await stream.read()).status.code == pb.Code.OK
        answer = await stub.SendMessage(spb.SendMessageRequest(messages=[v2_half(topic, b"v2-orphan", "01TXV2ORPH")]),
                                        metadata=V2_CLIENT, timeout=5)
        assert answer.status.code == pb.Code.OK
        command = await asyncio.wait_for(stream.read(), 15.0)
        recover = command.recover_orphaned_transaction_command
        assert recover.message.body == b"v2-orphan" and recover.message.topic.name == topic
        req = spb.EndTransactionRequest(topic=pb.Resource(name=topic), message_id=recover.message.system_properties
                                        .message_id, transaction_id=recover.transaction_id,
                                        resolution=pb.TransactionResolution.COMMIT,
                                        source=pb.TransactionSource.SOURCE_SERVER_CHECK)
        assert (await stub.EndTransaction(req, metadata=V2_CLIENT, timeout=5)).status.code == pb.Code.OK
        stream.cancel()
    await settled(broker)
    assert await bodies_in(broker, topic) == [b"v2-orphan"]


async def test_reject_transaction_message_refuses_halves_and_end_transaction(tmp_path, namesrv):
    with Broker(tmp_path / "b", name="broker-txoff", namesrv_addr=namesrv.addr, rejectTransactionMessage=True) as b:
        async with BrokerClient(b.addr) as c:
            await c.create_topic("TxOff", queues=1)
            sent = await c.send("TxOff", 0, [message(b"half", TRAN_MSG="true", PGROUP="pg")], sys_flag=0x4)
            assert sent.code == ResponseCode.NO_PERMISSION and "rejectTransactionMessage=true" in sent.remark
            end = {"producerGroup": "pg", "tranStateTableOffset": "0", "commitLogOffset": "0",
                   "commitOrRollback": "8"}
            resp = await c.request(RequestCode.END_TRANSACTION, end)
            assert resp.code == ResponseCode.NO_PERMISSION and "rejectTransactionMessage=true" in resp.remark
        assert await bodies_in(b, "TxOff", 1) == []


async def test_the_slave_promoted_to_master_goes_on_checking_where_the_old_master_stopped(tmp_path, namesrv, admin):
    conf = {**TX_CONF, "slaveSynchronizeInterval": 300, "transactionTimeOut": 600_000}  # no check before the switch
    topic, group = unique("TxPromote"), unique("pg-promote")
    with master_and_slave(tmp_path, namesrv.addr, "broker-txp", **conf) as (master, slave):
        await create_topic(admin, master, topic)
        p = await tx_producer(namesrv, group).start()
        decided = await p.send_message_in_transaction(Message(topic, b"decided"), lambda m, a: COMMIT)
        orphan = await p.send_half(Message(topic, b"orphan"))
        await p.remoting.close()  # the producer is gone before it ends the second transaction
        async with BrokerClient(slave.addr) as c:
            ext = end_header(group, orphan.queue_offset, orphan.offset_msg_id, COMMIT, orphan.msg_id, False)
            resp = await c.request(RequestCode.END_TRANSACTION, ext)
            assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in resp.remark

            async def replicated() -> bool:
                return (topic in await c.topic_configs()
                        and await half_count(slave) == await half_count(master) == 2
                        and sorted(await bodies_in(slave, topic)) == [b"decided"])

            async def state() -> str:
                return (f"topic {topic in await c.topic_configs()}, halves {await half_count(slave)} of"
                        f" {await half_count(master)}, {await bodies_in(slave, topic)}")

            try:
                await wait_for(replicated, 15.0, "the slave to hold the halves, the op and the topic")
            except Exception:
                raise AssertionError(await state()) from None
        master.stop()
        slave.stop()
        promoted = Broker(tmp_path / "s", name="broker-txp", namesrv_addr=namesrv.addr, **TX_CONF).start()
        try:
            asked: list[bytes] = []

            def checker(msg):
                asked.append(msg.body)
                return COMMIT

            async with tx_producer(namesrv, group, checker=checker, topics=(topic,)):
                async def delivered() -> bool:
                    return sorted(await bodies_in(promoted, topic)) == [b"decided", b"orphan"]

                await wait_for(delivered, 20.0, "the promoted master's check to commit the orphan")
                await settled(promoted)
            assert sorted(await bodies_in(promoted, topic)) == [b"decided", b"orphan"]
            assert asked and set(asked) == {b"orphan"} and decided.state is COMMIT
        finally:
            promoted.stop()
