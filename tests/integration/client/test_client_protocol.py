"""The SDK's side of RocketMQ's client protocol against a real broker: heartbeats make a consumer known with its
subscriptions and UNREGISTER_CLIENT makes it leave at once, the broker's NOTIFY_CONSUMER_IDS_CHANGED rebalances a
group without any polling, and where a new group starts reading."""

from __future__ import annotations

import pytest

from client import ConsumeFromWhere, Message, Producer, PushConsumer
from tests.integration.client.conftest import Recorder, create_topic, unique, wait_for

pytestmark = pytest.mark.integration


def push(namesrv, group: str, topic: str, listener, expression: str = "*", **kw) -> PushConsumer:
    c = PushConsumer(group, namesrv.addr, suspend_ms=2000, **kw)
    c.subscribe(topic, expression)
    c.register_message_listener(listener)
    return c


async def test_a_consumer_is_known_by_its_heartbeat_and_leaves_when_it_stops(namesrv, broker, admin):
    topic, group = unique("T_hb"), unique("G_hb")
    await create_topic(admin, broker, topic, queues=2)
    consumer = push(namesrv, group, topic, Recorder(), "A || B")
    async with consumer:
        assert await admin.consumer_ids(broker.addr, group) == [consumer.client_id]
        conns = await admin.consumer_connection(broker.addr, group)
        assert [c.client_id for c in conns.connections] == [consumer.client_id]
        assert conns.connections[0].language == "PYTHON"
        assert conns.subscriptions[topic] == "A || B"
        assert conns.subscriptions[f"%RETRY%{group}"] == "*"
        assert (conns.consume_type, conns.message_model) == ("CONSUME_PASSIVELY", "CLUSTERING")
        assert consumer.client_id.split("@")[1].split("#")[0].isdigit()  # <ip>@<pid>#<n>, spec §6.3
    # UNREGISTER_CLIENT at stop: gone now, not after the broker's 120 s channel expiry
    assert await admin.consumer_ids(broker.addr, group) == []


async def test_the_brokers_notification_rebalances_a_group_without_polling(namesrv, broker, admin):
    topic, group = unique("T_notify"), unique("G_notify")
    await create_topic(admin, broker, topic, queues=4)
    quiet = {"membership_poll_interval_s": 600, "rebalance_interval_s": 600, "takeover_delay_s": 0}
    first = await push(namesrv, group, topic, Recorder(), **quiet).start()
    try:
        await wait_for(lambda: len([q for q in first.owned_queues() if q.topic == topic]) == 4, 10, "c1 owning all")
        second = await push(namesrv, group, topic, Recorder(), **quiet).start()
        try:
            await wait_for(
                lambda: len([q for q in first.owned_queues() if q.topic == topic]) == 2,
                15,
                "c1 to give up half of the queues when the broker notified it of c2",
            )
            assert first.notifications >= 1
        finally:
            await second.stop()
        await wait_for(
            lambda: len([q for q in first.owned_queues() if q.topic == topic]) == 4,
            15,
            "c1 to take every queue again when the broker notified it that c2 left",
        )
    finally:
        await first.stop()


async def test_a_new_group_on_a_queue_that_still_starts_at_0_reads_it_all_whatever_consume_from_where_says(
    namesrv, broker, admin
):
    """RocketMQ's rule (spec §2.3, QUERY_CONSUMER_OFFSET): with nothing committed the broker answers offset 0 while
    the queue still starts at 0, so CONSUME_FROM_LAST_OFFSET only applies once old messages were deleted (the
    client's side of that, 22 -> GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP, is in tests/unit/client)."""
    topic, group = unique("T_cfw"), unique("G_cfw")
    await create_topic(admin, broker, topic, queues=1)
    async with Producer(unique("P"), namesrv.addr) as producer:
        for i in range(5):
            await producer.send(Message(topic, f"old-{i}".encode()))
    rec = Recorder()
    consumer = push(namesrv, group, topic, rec, consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    async with consumer:
        await wait_for(lambda: rec.unique_count() >= 5, 20, "the five messages stored before the group existed")
    assert sorted(rec.bodies) == [f"old-{i}".encode() for i in range(5)]
    assert await admin.query_consumer_offset(broker.addr, group, topic, 0) == 5  # committed at stop
