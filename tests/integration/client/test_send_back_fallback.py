"""A failed message whose master is down still gets its retry: CONSUMER_SEND_MSG_BACK cannot reach the master, so
the consumer sends it to ``%RETRY%<group>`` on another broker group, as RocketMQ's consumer does."""

from __future__ import annotations

import asyncio

import pytest

from client import ConsumeStatus, Message, Producer
from tests.integration.client.conftest import SHORT_DELAY_LEVELS, push_consumer, unique, wait_for
from harness.procs import Broker

pytestmark = pytest.mark.integration


@pytest.fixture
def brokers(tmp_path, namesrv):
    common = {"namesrv_addr": namesrv.addr, "messageDelayLevel": SHORT_DELAY_LEVELS}
    a = Broker(tmp_path / "a", name="broker-fa", **common).start()
    b = Broker(tmp_path / "b", name="broker-fb", **common).start()
    yield a, b
    b.stop()
    a.stop()


async def test_a_message_failed_while_its_master_is_down_is_retried_through_another_groups_retry_topic(
    namesrv, admin, brokers
):
    a, b = brokers
    topic, group = unique("T_fallback"), unique("G_fallback")
    for broker in (a, b):
        await admin.update_topic(broker.addr, topic, read_queue_nums=1, write_queue_nums=1)

    async def routed() -> bool:
        route = await admin.topic_route(topic)
        return {mq.broker_name for mq in route.publish_queues} == {"broker-fa", "broker-fb"}

    await wait_for(routed, 40, "both groups in the route", interval_s=0.5)
    b_port = int(b.addr.rsplit(":", 1)[1])
    master_killed = asyncio.Event()
    delivered: list = []

    async def listener(msgs) -> ConsumeStatus:
        """broker-fa's message fails once its master is dead (so CONSUMER_SEND_MSG_BACK cannot reach it) and is
        accepted when it comes back from broker-fb's retry queue; broker-fb's own message is taken at once."""
        m = msgs[0]
        delivered.append(m)
        if m.store_host[1] == b_port:
            return ConsumeStatus.CONSUME_SUCCESS
        await master_killed.wait()
        return ConsumeStatus.RECONSUME_LATER

    consumer = push_consumer(
        namesrv,
        group,
        topic,
        listener,
        pull_retry_delay_s=0.5,
        local_retry_delay_s=0.5,
        membership_poll_interval_s=0.5,
        # The retry topic reaches the nameserver after the first heartbeat, maybe after the consumer's first route
        # look-up; the default 30 s refresh would then be this test's whole wait.
        poll_name_server_interval_s=1.0,
    )
    retry_topic = f"%RETRY%{group}"
    async with consumer:
        await wait_for(
            lambda: (
                {mq.broker_name for mq in consumer.owned_queues() if mq.topic == retry_topic}
                == {"broker-fa", "broker-fb"}
            ),
            30,
            f"{retry_topic} routed on both groups (created by the consumer's heartbeat)",
            interval_s=0.2,
        )
        async with Producer(unique("P"), namesrv.addr) as producer:
            sent = {}
            for i in range(2):  # round-robin: one message per group
                result = await producer.send(Message(topic, f"m-{i}".encode()))
                sent[result.message_queue.broker_name] = f"m-{i}".encode()
        assert set(sent) == {"broker-fa", "broker-fb"}
        await wait_for(lambda: any(d.body == sent["broker-fa"] for d in delivered), 20, "broker-fa's message")
        a.kill()
        master_killed.set()
        await wait_for(
            lambda: any(d.body == sent["broker-fa"] and d.store_host[1] == b_port for d in delivered),
            30,
            "broker-fa's message to come back from broker-fb's retry queue",
        )
    moved = next(d for d in delivered if d.body == sent["broker-fa"] and d.store_host[1] == b_port)
    assert moved.topic == topic  # the listener sees the original topic, not %RETRY%
    assert moved.properties["RETRY_TOPIC"] == topic
    assert moved.reconsume_times == 1
    assert [d.body for d in delivered].count(sent["broker-fa"]) == 2  # no local retry was needed
