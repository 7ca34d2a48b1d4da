"""The measurement both failover benches share (dev processes and compose containers): from the kill of a master
to the first SEND_OK and the first message consumed after it, and the summary of such runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from bench.report import median_of, print_table
from client import Message, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus


async def measure(producer: Producer, consumer: PullConsumer, topic: str, group: str, queues: int,
                  kill: Callable[[], Awaitable[None]]) -> dict:
    """Catch the consumer up on every queue, ``kill()`` the master, then time the first SEND_OK (sends retried at
    once) and the first message pulled after the kill (pulls retried every 10 ms)."""
    offsets = {}
    for q in range(queues):
        mq = MessageQueue(topic, group, q)
        offsets[q] = 0
        while (r := await consumer.pull(mq, offsets[q], max_nums=32, timeout_s=3)).status is PullStatus.FOUND:
            offsets[q] = r.next_begin_offset

    async def first_consumed() -> float:
        while True:
            for q in range(queues):
                try:
                    r = await consumer.pull(MessageQueue(topic, group, q), offsets[q], max_nums=1, timeout_s=1)
                except Exception:  # noqa: BLE001 - the dead master or a switching one
                    await asyncio.sleep(0.01)
                    continue
                if r.status is PullStatus.FOUND:
                    return time.monotonic()

    await kill()
    killed_at = time.monotonic()
    consumed = asyncio.ensure_future(first_consumed())
    failed = 0
    try:
        while True:
            if time.monotonic() - killed_at > 60:
                raise TimeoutError("no SEND_OK within 60 s of the kill")
            try:
                result = await producer.send(Message(topic, b"after"))
                if result.status is SendStatus.SEND_OK:
                    break
            except Exception:  # noqa: BLE001 - counted: the route names the dead master, or a switch is under way
                pass
            failed += 1
            await asyncio.sleep(0.01)
        elapsed_ms = (time.monotonic() - killed_at) * 1000
        consumed_ms = (await asyncio.wait_for(consumed, 60) - killed_at) * 1000
    finally:
        consumed.cancel()
    return {"kill_to_send_ok_ms": round(elapsed_ms, 1), "kill_to_consumed_ms": round(consumed_ms, 1),
            "failed_attempts": failed}


def summarize(title: str, runs: list[dict]) -> dict:
    print_table(title, ["run", "SEND_OK ms", "consumed ms", "failed sends", "new master", "masterEpoch"],
                [[i, r["kill_to_send_ok_ms"], r["kill_to_consumed_ms"], r["failed_attempts"], r["new_master"],
                  r["master_epoch"]] for i, r in enumerate(runs)])
    summary = {}
    for key in ("kill_to_send_ok_ms", "kill_to_consumed_ms"):
        times = [r[key] for r in runs]
        summary[key] = {"median_ms": median_of(times), "min_ms": min(times), "max_ms": max(times)}
        print(f"{key}: median {median_of(times):.0f} ms (min {min(times):.0f}, max {max(times):.0f})")
    return summary
