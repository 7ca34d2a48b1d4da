"""Message trace end to end: a broker with traceTopicEnable (and no auto-creation, so the trace topic can only come
from that key), a producer and a push consumer with enable_trace=True, and `mqctl queryMsgTraceById` reading the
trace records back through the broker's index."""

from __future__ import annotations

import asyncio
import json

import pytest

from client import AdminClient, Message, Producer
from client.trace_codec import TRACE_TOPIC, TraceType, decode
from harness.waiting import wait_until
from tests.brokers import broker_fixture
from tests.integration.client.conftest import SHORT_DELAY_LEVELS, Recorder, create_topic, push_consumer, unique
from tests.integration.ctl.cli import mqctl

TRACE_WAIT_S = 20.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-trace", traceTopicEnable=True,
                              autoCreateTopicEnable=False, messageDelayLevel=SHORT_DELAY_LEVELS)


def trace_json(namesrv, msg_id: str) -> dict | None:
    result = mqctl("queryMsgTraceById", "-n", namesrv.addr, "-i", msg_id, "--json")
    return json.loads(result.stdout) if result.exit_code == 0 else None


async def produce_and_consume(namesrv, broker, topic: str, group: str, recorder: Recorder):
    """Three traced sends with keys, consumed by a traced push consumer whose listener refuses each message once;
    the SendResults."""
    async with AdminClient(namesrv.addr) as admin:
        await create_topic(admin, broker, topic, queues=2)
        route = await admin.topic_route(TRACE_TOPIC)
        assert len(route.publish_queues) == 1  # traceTopicEnable made it, with one queue, as RocketMQ does
    producer = await Producer("trace_pg", namesrv.addr, enable_trace=True).start()
    consumer = push_consumer(namesrv, group, topic, recorder, enable_trace=True)
    try:
        results = [await producer.send(Message(topic, f"traced {i}".encode(), tags="TagT", keys=[f"order-{i}"]))
                   for i in range(3)]
        await consumer.start()
        deadline = asyncio.get_running_loop().time() + TRACE_WAIT_S
        while recorder.unique_count() < 3:
            assert asyncio.get_running_loop().time() < deadline, f"consumed {recorder.bodies}"
            recorder.event.clear()
            await asyncio.wait_for(recorder.event.wait(), TRACE_WAIT_S)
    finally:
        await consumer.stop()  # both flush their buffered trace records before they stop
        await producer.stop()
    assert producer.trace is not None and producer.trace.dispatcher.sent == 3
    assert consumer.trace is not None and consumer.trace.dispatcher.failed == 0
    return results


def test_query_msg_trace_by_id_shows_the_send_the_store_and_each_delivery(namesrv, broker):
    topic, group = unique("t_trace"), unique("cg_trace")
    recorder = Recorder(fail_first=1)
    results = asyncio.run(produce_and_consume(namesrv, broker, topic, group, recorder))
    msg_id = results[1].msg_id

    def complete() -> dict | None:
        data = trace_json(namesrv, msg_id)
        if data and data["pub"] and len([s for s in data["sub"] if s["status"] != "unknown"]) >= 2:
            return data
        return None

    data = wait_until(complete, TRACE_WAIT_S, f"the trace of {msg_id}: Pub and two deliveries")
    (pub,) = data["pub"]
    assert (pub["group"], pub["status"], pub["topic"]) == ("trace_pg", "success", topic)
    assert pub["storeHost"] == broker.addr and pub["storeTime"] > 0 and pub["costMs"] >= 0
    assert pub["offsetMsgId"] == results[1].offset_msg_id
    subs = data["sub"]
    assert [s["group"] for s in subs] == [group, group]
    assert [(s["status"], s["retryTimes"]) for s in subs] == [("failed", 0), ("success", 1)]  # refused once
    assert all(s["clientHost"] and s["time"] >= pub["time"] for s in subs)

    text = mqctl("queryMsgTraceById", "-n", namesrv.addr, "-i", msg_id).stdout
    assert "#ProducerGroup" in text and "#ConsumerGroup" in text and broker.addr in text
    assert text.count(group) == 2 and "trace_pg" in text

    async def raw_records() -> set[TraceType]:  # the wire: RocketMQ's three record types, found by the msgId key
        async with AdminClient(namesrv.addr) as admin:
            stored = await admin.query_message(broker.addr, TRACE_TOPIC, msg_id)
        return {r.type for m in stored for r in decode(m.body.decode()) if r.msg_id == msg_id}

    assert asyncio.run(raw_records()) == {TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER}


def test_a_message_without_trace_records_is_reported_as_not_found(namesrv, broker):
    result = mqctl("queryMsgTraceById", "-n", namesrv.addr, "-i", "0" * 32)
    assert result.exit_code == 1
    assert "208" in result.stderr and "no message" in result.stderr


def test_a_renamed_trace_topic_and_an_auto_created_default_one(tmp_path):
    """msgTraceTopicName renames the topic traceTopicEnable creates (clients name it with trace_topic=); without
    traceTopicEnable, autoCreateTopicEnable makes RMQ_SYS_TRACE_TOPIC on the first trace send, as in RocketMQ."""
    from harness.procs import Broker, Namesrv

    custom = "TRACE_custom"
    with Namesrv(tmp_path / "ns") as ns, Broker(tmp_path / "b", name="broker-trace2", namesrv_addr=ns.addr,
                                                traceTopicEnable=True, msgTraceTopicName=custom) as broker:
        async def send_traced() -> tuple[str, str]:
            async with AdminClient(ns.addr) as admin:
                topic = unique("t_trace2")
                await create_topic(admin, broker, topic, queues=1)
                assert len((await admin.topic_route(custom)).publish_queues) == 1
            ids = []
            for kwargs in ({"trace_topic": custom}, {"enable_trace": True}):
                producer = await Producer(unique("pg_trace2"), ns.addr, **kwargs).start()
                try:
                    ids.append((await producer.send(Message(topic, b"x"))).msg_id)
                finally:
                    await producer.stop()
                assert producer.trace is not None and producer.trace.dispatcher.sent == 1, kwargs
            return ids[0], ids[1]

        in_custom, in_default = asyncio.run(send_traced())

        def pub_of(msg_id: str, *topic: str) -> bool:
            result = mqctl("queryMsgTraceById", "-n", ns.addr, "-i", msg_id, *topic, "--json")
            return result.exit_code == 0 and len(json.loads(result.stdout)["pub"]) == 1

        wait_until(lambda: pub_of(in_custom, "-t", custom), TRACE_WAIT_S, f"the Pub of {in_custom} in {custom}")
        wait_until(lambda: pub_of(in_default), TRACE_WAIT_S, f"the Pub of {in_default} in {TRACE_TOPIC}")
        assert mqctl("queryMsgTraceById", "-n", ns.addr, "-i", in_default, "-t", custom).exit_code == 1
