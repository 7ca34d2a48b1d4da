"""A producer with two broker groups keeps sending when one master dies: failed batches go to the other group."""

from __future__ import annotations

import asyncio

import pytest

from client import Message, Producer, SendStatus
from tests.integration.client.conftest import unique, wait_for
from harness.procs import Broker

pytestmark = pytest.mark.integration


async def test_sends_move_to_the_surviving_broker_group_when_a_master_is_killed(tmp_path, namesrv, admin):
    a = Broker(tmp_path / "a", name="broker-fa", namesrv_addr=namesrv.addr).start()
    b = Broker(tmp_path / "b", name="broker-fb", namesrv_addr=namesrv.addr).start()
    try:
        topic = unique("T_failover")
        for broker in (a, b):
            await admin.update_topic(broker.addr, topic, read_queue_nums=2, write_queue_nums=2)

        async def both_routed() -> bool:
            names = {mq.broker_name for mq in (await admin.topic_route(topic)).publish_queues}
            return names == {"broker-fa", "broker-fb"}

        await wait_for(both_routed, 20, "both groups in the route", interval_s=0.2)
        async with Producer(unique("P"), namesrv.addr, send_timeout_s=5.0) as producer:
            before = [await producer.send(Message(topic, b"x")) for _ in range(8)]  # one batch each: round-robin
            assert {r.message_queue.broker_name for r in before} == {"broker-fa", "broker-fb"}
            a.kill()
            after = []
            for _ in range(20):  # single sends rotate over every queue, the dead group's included
                after.append(await producer.send(Message(topic, b"y")))
            after += await asyncio.gather(*(producer.send(Message(topic, b"z")) for _ in range(200)))
            stats = producer.stats
    finally:
        b.stop()
        a.stop()
    assert all(r.status is SendStatus.SEND_OK for r in after)
    assert {r.message_queue.broker_name for r in after} == {"broker-fb"}
    assert stats.failed == 0
    assert stats.retries >= 1  # at least one batch hit the dead master and was retried on broker-fb
