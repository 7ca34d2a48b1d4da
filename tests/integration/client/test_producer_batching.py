"""How the Producer shapes its requests against a real broker: pipelined batches for synchronous senders, and
queue choice (round-robin for one-at-a-time senders, sticky stints for a stream)."""

from __future__ import annotations

import asyncio
from collections import Counter
from itertools import pairwise

import pytest

from client import Message, Producer, SendStatus
from tests.integration.client.conftest import create_topic, unique

pytestmark = pytest.mark.integration


async def closed_loop(producer: Producer, topic: str, senders: int, rounds: int) -> list:
    """``senders`` coroutines that each send ``rounds`` messages, one at a time, waiting for every result."""

    async def sender(k: int) -> list:
        return [await producer.send(Message(topic, f"{k}-{i}".encode().ljust(1024))) for i in range(rounds)]

    return [r for rs in await asyncio.gather(*(sender(k) for k in range(senders))) for r in rs]


@pytest.mark.parametrize(("depth", "per_request"), [(1, (56, 64)), (2, (24, 40))])
async def test_synchronous_senders_are_spread_over_pipeline_depth_requests(namesrv, broker, admin, depth, per_request):
    """64 senders: with depth 1 every request carries all of them (the client and the broker take turns);
    with the default depth 2 they settle into two groups of about 32, one stored while the other completes."""
    topic = unique("T_pipe")
    await create_topic(admin, broker, topic, queues=4)
    async with Producer(unique("P"), namesrv.addr, pipeline_depth=depth) as producer:
        await closed_loop(producer, topic, 64, 2)  # the first bursts measure the concurrency
        rpcs, messages = producer.stats.rpcs, producer.stats.messages
        results = await closed_loop(producer, topic, 64, 30)
        per_rpc = (producer.stats.messages - messages) / (producer.stats.rpcs - rpcs)
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 64 * 30
    low, high = per_request
    assert low <= per_rpc <= high, f"{per_rpc:.1f} messages per request with pipeline_depth={depth}"


async def test_a_sender_that_waits_for_each_result_rotates_queues_like_rocketmq(namesrv, broker, admin):
    topic = unique("T_rr")
    await create_topic(admin, broker, topic, queues=4)
    async with Producer(unique("P"), namesrv.addr) as producer:
        results = [await producer.send(Message(topic, f"m{i}".encode())) for i in range(12)]
    queues = [r.message_queue.queue_id for r in results]
    assert Counter(queues) == {0: 3, 1: 3, 2: 3, 3: 3}
    assert all(a != b for a, b in pairwise(queues)), queues


def queue_runs(results: list) -> int:
    """How many runs of one queue the results form in commitlog order (the offset message id ends with the
    record's physical offset)."""
    ordered = sorted(results, key=lambda r: int(r.offset_msg_id[-16:], 16))
    return 1 + sum(a.message_queue != b.message_queue for a, b in pairwise(ordered))


async def test_a_stream_stays_on_a_queue_for_a_stint_and_every_queue_gets_its_share(namesrv, broker, admin):
    """64 synchronous senders of 1 KiB make a stream of 32-message batches: with 64 KiB stints (and no time bound)
    two batches in a row go to one queue before the next queue's turn; with ``sticky_queue_bytes=0`` every batch
    moves on."""
    topic = unique("T_sticky")
    await create_topic(admin, broker, topic, queues=4)

    async def stream(sticky_queue_bytes: int) -> list:
        async with Producer(
            unique("P"), namesrv.addr, sticky_queue_bytes=sticky_queue_bytes, sticky_queue_ms=60_000
        ) as producer:
            await closed_loop(producer, topic, 64, 2)  # measure the concurrency first
            return await closed_loop(producer, topic, 64, 32)

    sticky = await stream(64 * 1024 - 1)
    plain = await stream(0)
    for results in (sticky, plain):
        per_queue = Counter(r.message_queue.queue_id for r in results)
        assert set(per_queue) == {0, 1, 2, 3}
        assert max(per_queue.values()) - min(per_queue.values()) <= 64 + 32, per_queue  # within about one stint
    batches = 64 * 32 // 32
    assert queue_runs(plain) >= 0.8 * batches, f"{queue_runs(plain)} runs of one queue for {batches} batches"
    assert queue_runs(sticky) <= 0.65 * batches, f"{queue_runs(sticky)} runs of one queue for {batches} batches"
