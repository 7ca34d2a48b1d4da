"""Clustering rebalance and broadcasting with several PushConsumers in one group, on a real broker."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from client import Message, MessageModel, Producer, PushConsumer
from tests.integration.client.conftest import Recorder, create_topic, push_consumer, unique, wait_for

pytestmark = pytest.mark.integration


def make_consumer(namesrv, group: str, topic: str, listener, **kw) -> PushConsumer:
    """Commits every second and notices members joining and leaving within a second or two."""
    return push_consumer(namesrv, group, topic, listener, persist_interval_s=1.0, membership_poll_interval_s=0.5,
                         takeover_delay_s=1.5, **kw)


def owned(c: PushConsumer, topic: str) -> list:
    return [mq for mq in c.owned_queues() if mq.topic == topic]


def ownership_is_exclusive(consumers: list[PushConsumer], topic: str, n_queues: int) -> bool:
    owned = [mq for c in consumers for mq in c.owned_queues() if mq.topic == topic]
    return len(owned) == n_queues and len(set(owned)) == n_queues


async def test_queues_move_between_consumers_as_they_join_and_leave_and_nothing_is_lost(namesrv, broker, admin):
    topic, group, queues = unique("T_rebal"), unique("G_rebal"), 4
    await create_topic(admin, broker, topic, queues=queues)
    rec = Recorder()
    sent: list[bytes] = []
    async with Producer(unique("P"), namesrv.addr) as producer:

        async def produce(n: int) -> None:
            for _ in range(n):
                body = f"r-{len(sent)}".encode()
                sent.append(body)
                await producer.send(Message(topic, body))

        first = await make_consumer(namesrv, group, topic, rec).start()
        await produce(200)
        await wait_for(lambda: len(owned(first, topic)) == queues, 10, "c1 owning all")

        second = await make_consumer(namesrv, group, topic, rec).start()
        both = [first, second]
        await wait_for(
            lambda: ownership_is_exclusive(both, topic, queues) and len(owned(second, topic)) == queues // 2,
            15,
            "the queues split between two consumers",
        )
        await produce(200)
        await wait_for(lambda: rec.unique_count() >= 400, 30, "400 messages consumed by two consumers")

        await first.stop()
        await wait_for(lambda: len(owned(second, topic)) == queues, 15, "c2 taking every queue after c1 left")
        await produce(200)
        await wait_for(lambda: rec.unique_count() >= 600, 30, "600 messages consumed")
        await second.stop()

    counts = Counter(rec.bodies)
    assert set(counts) == set(sent)
    assert [b for b, n in counts.items() if n > 1] == []


async def test_broadcasting_gives_every_consumer_every_message(namesrv, broker, admin, tmp_path):
    topic, group = unique("T_bcast"), unique("G_bcast")
    await create_topic(admin, broker, topic, queues=2)
    recs = [Recorder() for _ in range(3)]
    consumers = [
        make_consumer(
            namesrv, group, topic, rec, message_model=MessageModel.BROADCASTING, offset_store_dir=tmp_path / f"c{i}"
        )
        for i, rec in enumerate(recs)
    ]
    for c in consumers:
        await c.start()
    try:
        async with Producer(unique("P"), namesrv.addr) as producer:
            await asyncio.gather(*(producer.send(Message(topic, f"b-{i}".encode())) for i in range(100)))
        for i, rec in enumerate(recs):
            await wait_for(lambda rec=rec: rec.unique_count() >= 100, 20, f"consumer {i} getting all 100")
    finally:
        for c in consumers:
            await c.stop()
    expected = {f"b-{i}".encode() for i in range(100)}
    for rec in recs:
        assert set(rec.bodies) == expected and len(rec.bodies) == 100
    assert all((tmp_path / f"c{i}" / group / "offsets.json").exists() for i in range(3))
