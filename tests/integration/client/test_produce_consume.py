"""Producer and PushConsumer against a real nameserver and broker: delivery, batching, tags, delays, retries."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from client import Message, MessageQueue, Producer, PushConsumer, SendStatus
from client.pull_consumer import PullConsumer
from tests.integration.client.conftest import Recorder, create_topic, push_consumer, unique, wait_for

pytestmark = pytest.mark.integration


def consumer(namesrv, group: str, topic: str, listener, expression: str = "*", **kw) -> PushConsumer:
    return push_consumer(namesrv, group, topic, listener, expression, suspend_ms=2000, **kw)


async def test_concurrent_senders_are_batched_and_every_message_is_consumed_once(namesrv, broker, admin):
    topic, group = unique("T_many"), unique("G_many")
    await create_topic(admin, broker, topic, queues=4)
    total, senders = 4000, 64
    async with Producer(unique("P"), namesrv.addr) as producer:

        async def sender(k: int) -> list:
            return [await producer.send(Message(topic, f"m-{i}".encode())) for i in range(k, total, senders)]

        results = [r for rs in await asyncio.gather(*(sender(k) for k in range(senders))) for r in rs]
        stats = producer.stats
    assert len(results) == total
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == total
    assert len({(r.message_queue, r.queue_offset) for r in results}) == total
    assert stats.rpcs * 4 <= total, f"{stats.rpcs} SendMessage RPCs for {total} messages: sends were not batched"

    rec = Recorder()
    async with consumer(namesrv, group, topic, rec, consume_batch_max_size=8):
        await wait_for(lambda: rec.unique_count() >= total, 60, f"{total} messages consumed")
    counts = Counter(rec.bodies)
    assert set(counts) == {f"m-{i}".encode() for i in range(total)}
    assert [b for b, n in counts.items() if n > 1] == []


async def test_send_result_names_the_queue_and_offset_the_message_was_stored_at(namesrv, broker, admin):
    topic = unique("T_result")
    await create_topic(admin, broker, topic, queues=2)
    async with Producer(unique("P"), namesrv.addr) as producer, PullConsumer(unique("G"), namesrv.addr) as puller:
        result = await producer.send(Message(topic, b"hello", tags="TagA", keys=["k1", "k2"], properties={"a": "b"}))
        pulled = await puller.pull(result.message_queue, result.queue_offset, max_nums=1)
    assert len(result.msg_id) == 32
    assert result.offset_msg_id
    [msg] = pulled.messages
    assert (msg.body, msg.tags, msg.keys, msg.properties["a"]) == (b"hello", "TagA", "k1 k2", "b")
    assert msg.msg_id == result.msg_id


async def test_tag_subscription_delivers_only_the_matching_tags(namesrv, broker, admin):
    topic, group = unique("T_tags"), unique("G_tags")
    await create_topic(admin, broker, topic, queues=2)
    async with Producer(unique("P"), namesrv.addr) as producer:
        sent = [await producer.send(Message(topic, f"{'ABC'[i % 3]}-{i}".encode(), tags="ABC"[i % 3]))
                for i in range(60)]
    ends: dict[MessageQueue, int] = {}
    for r in sent:
        ends[r.message_queue] = max(ends.get(r.message_queue, 0), r.queue_offset + 1)
    rec = Recorder()
    async with consumer(namesrv, group, topic, rec, expression="A || C") as c:
        # The consumer's offset of a queue reaches the queue's end only once every message below it was pulled and
        # consumed, so a B message delivered by mistake is in the recorder by then.
        await wait_for(lambda: all(c.offsets.get(mq) == end for mq, end in ends.items()), 30,
                       lambda: f"the consumer's offsets to reach the queue ends {ends}")
    assert sorted({m.tags for m in rec.messages}) == ["A", "C"]
    assert rec.unique_count() == len(rec.bodies) == 40


async def test_delayed_message_is_delivered_no_sooner_than_its_level(namesrv, broker, admin):
    topic, group = unique("T_delay"), unique("G_delay")
    await create_topic(admin, broker, topic, queues=1)
    rec = Recorder()
    received_at: dict[bytes, float] = {}

    async def listener(msgs):
        for m in msgs:
            received_at[m.body] = time.time()
        return await rec(msgs)

    async with consumer(namesrv, group, topic, listener), Producer(unique("P"), namesrv.addr) as producer:
        sent_at = time.time()
        await producer.send(Message(topic, b"now"))
        await producer.send(Message(topic, b"level-2", delay_level=2))
        await wait_for(lambda: b"level-2" in received_at, 20, "the delayed message")
    # sent second, delivered second: the undelayed message did not wait for it
    assert sorted(received_at, key=received_at.get) == [b"now", b"level-2"]
    delayed = next(m for m in rec.messages if m.body == b"level-2")
    assert delayed.topic == topic and delayed.properties.get("REAL_TOPIC") == topic  # re-put from the schedule topic
    assert received_at[b"level-2"] - sent_at >= 1.9  # level 2 is 2 s on this broker (ms clock rounding)


async def test_reconsume_later_redelivers_through_the_retry_topic(namesrv, broker, admin):
    topic, group = unique("T_retry"), unique("G_retry")
    await create_topic(admin, broker, topic, queues=1)
    rec = Recorder(fail_first=2)
    async with consumer(namesrv, group, topic, rec), Producer(unique("P"), namesrv.addr) as producer:
        await producer.send(Message(topic, b"flaky", tags="T"))
        await wait_for(lambda: rec.bodies, 40, "the message to succeed on its third delivery")
    assert rec.attempts[b"flaky"] == 3
    [msg] = rec.messages
    assert msg.topic == topic  # the retry topic is hidden from the listener
    assert msg.reconsume_times == 2


async def test_a_message_that_always_fails_ends_in_the_dead_letter_queue(namesrv, broker, admin):
    topic, group = unique("T_dlq"), unique("G_dlq")
    await create_topic(admin, broker, topic, queues=1)
    rec = Recorder(fail_first=1000)
    async with consumer(namesrv, group, topic, rec, max_reconsume_times=2), Producer(unique("P"), namesrv.addr) as p:
        await p.send(Message(topic, b"poison"))
        await wait_for(lambda: rec.attempts[b"poison"] >= 3, 40, "three failed deliveries")
    dlq = f"%DLQ%{group}"

    async def in_dlq():
        # The DLQ is write-only (RocketMQ's PERM_WRITE); an operator makes it readable to inspect it.
        await admin.update_topic(broker.addr, dlq, read_queue_nums=1, write_queue_nums=1, perm=6)
        async with PullConsumer(unique("G_dlq_reader"), namesrv.addr) as puller:
            return (await puller.pull(MessageQueue(dlq, "broker-a", 0), 0)).messages

    found = await wait_for(in_dlq, 20, f"the message in {dlq}")
    assert [m.body for m in found] == [b"poison"]
    assert rec.attempts[b"poison"] == 3  # first delivery + 2 reconsumes, then no more


async def test_first_send_to_a_new_topic_creates_it_through_the_default_route(namesrv, broker, admin):
    topic = unique("T_auto")
    async with Producer(unique("P"), namesrv.addr) as producer:
        first = await producer.send(Message(topic, b"first"))
        assert first.status is SendStatus.SEND_OK
        assert first.message_queue.broker_name == "broker-a"

        async def routed():
            return (await admin.topic_route(topic)).publish_queues

        queues = await wait_for(routed, 40, f"the nameserver to route the auto-created {topic}", interval_s=0.2)
        assert {mq.broker_name for mq in queues} == {"broker-a"}
        results = [await producer.send(Message(topic, f"n-{i}".encode())) for i in range(8)]
    assert all(r.status is SendStatus.SEND_OK for r in results)


async def test_stop_sends_everything_already_accepted(namesrv, broker, admin):
    topic = unique("T_flush")
    await create_topic(admin, broker, topic, queues=2)
    producer = await Producer(unique("P"), namesrv.addr, linger_ms=50).start()
    futures = [producer.send_async(Message(topic, f"f-{i}".encode())) for i in range(300)]
    producer.send_oneway(Message(topic, b"oneway"))
    await producer.stop()
    assert all(f.done() and f.result().status is SendStatus.SEND_OK for f in futures)
    async with PullConsumer(unique("G"), namesrv.addr) as puller:
        bodies = []
        for mq in await puller.fetch_subscribe_queues(topic):
            offset = 0
            while (result := await puller.pull(mq, offset)).messages:
                bodies += [m.body for m in result.messages]
                offset = result.next_begin_offset
    assert sorted(bodies) == sorted([f"f-{i}".encode() for i in range(300)] + [b"oneway"])


async def test_a_dedup_producer_stores_a_resent_message_once(namesrv, broker, admin):
    topic = unique("T_dedup")
    await create_topic(admin, broker, topic, queues=1)
    msg = Message(topic, b"once")
    async with Producer(unique("P"), namesrv.addr, dedup=True) as producer:
        first = await producer.send(msg)
        again = await producer.send(msg)  # the same object keeps its UNIQ_KEY, like a retry
    assert again.msg_id == first.msg_id
    assert again.queue_offset == first.queue_offset
    offsets = await admin.queue_offsets(broker.addr, topic, 0)
    assert offsets.max_offset == 1
