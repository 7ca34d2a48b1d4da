"""A PushConsumer of many topics starts pulling every queue at once, on a real broker (bench.scaling topics=1000:
the consumer was still looking offsets up minutes after its start).

The requests are counted by ``harness.request_tap`` as they pass from the consumer to the real broker. 300 topics
of 8 queues: 2,100 of the 2,400 long polls are held on one connection, past the broker's 1,024 requests served at
once per connection; held pulls are parked (``Connection.parked``), so they no longer stall the connection's other
requests (before, offset lookups and further pulls waited behind them up to the 15 s hold and timed out).
"""

from __future__ import annotations

import asyncio

import pytest

from client import ConsumeStatus, Message, Producer
from client.message import MessageQueue
from client.offset_store import RemoteBrokerOffsetStore
from client.push_consumer import START_OFFSET_LOOKUPS
from client.start_offset import queue_offset
from harness.request_tap import RequestTap
from remoting.codes import RequestCode
from tests.integration.client.conftest import create_topic, push_consumer, unique, wait_for

pytestmark = pytest.mark.integration

TOPICS, QUEUES = 300, 8


async def test_many_topics_every_queue_pulls_from_its_start_offset_with_lookups_overlapping(namesrv, broker, admin):
    prefix, group = unique("T_start"), unique("G_start")
    topics = [f"{prefix}_{i}" for i in range(TOPICS)]
    await asyncio.gather(*(admin.update_topic(broker.addr, t, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
                           for t in topics[:-1]))
    await create_topic(admin, broker, topics[-1], queues=QUEUES)  # waits for the nameserver to route it
    await admin.update_subscription_group(broker.addr, group)
    async with Producer(unique("P"), namesrv.addr) as producer:
        for t in topics:
            await producer.send(Message(t, t.encode()))
        committed = await commit_at_max(producer, group, topics[0])  # a committed offset wins over FIRST_OFFSET

    delivered: set[str] = set()

    async def listener(msgs) -> ConsumeStatus:
        delivered.update(m.topic for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = push_consumer(namesrv, group, topics[0], listener)
    for t in topics[1:]:
        consumer.subscribe(t)
    tap = RequestTap().attach(consumer.remoting.client)
    await consumer.start()
    try:
        await wait_for(lambda: tap.pulled_queues(prefix) == TOPICS * QUEUES, 30,
                       lambda: f"every queue pulled ({tap.pulled_queues(prefix)} of {TOPICS * QUEUES})")
        await wait_for(lambda: delivered >= set(topics[1:]), 30,
                       lambda: f"a message of every topic but the first ({len(delivered)} delivered)")
        # the start-offset lookups overlapped across topics, within the bound, instead of one topic at a time
        assert QUEUES < tap.max_in_flight[RequestCode.QUERY_CONSUMER_OFFSET] <= START_OFFSET_LOOKUPS
        # one consumer list per broker group and round, not one per topic
        assert tap.sent[RequestCode.GET_CONSUMER_LIST_BY_GROUP] < TOPICS // 10
        firsts = {(t, q): off for (t, q), off in tap.first_pull_offset.items() if t.startswith(prefix)}
        assert {k: v for k, v in firsts.items() if k[0] == topics[0]} == committed
        assert {v for k, v in firsts.items() if k[0] != topics[0]} == {0}  # CONSUME_FROM_FIRST_OFFSET
        assert topics[0] not in delivered
    finally:
        await consumer.stop()


async def commit_at_max(producer: Producer, group: str, topic: str) -> dict[tuple[str, int], int]:
    """Commit every queue of ``topic`` for ``group`` at its max offset (past its messages), with the SDK's offset
    store on the producer's connections; returns {(topic, queue id): offset}."""
    route = await producer.routes.refresh(topic)
    store = RemoteBrokerOffsetStore(group, producer.routes, producer.remoting)
    out = {}
    for mq in route.subscribe_queues:
        assert isinstance(mq, MessageQueue)
        offset = await queue_offset(producer.routes, producer.remoting, mq, RequestCode.GET_MAX_OFFSET,
                                    {"topic": topic, "queueId": str(mq.queue_id)}, 5.0)
        await store.commit(mq, offset)
        out[(topic, mq.queue_id)] = offset
    return out
