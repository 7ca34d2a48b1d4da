"""PullRequestHoldService: held pulls wake on a dispatch notification (from the loop or another thread), time
out, and are all released at stop."""

from __future__ import annotations

import asyncio
import threading

from broker.long_polling import PullRequestHoldService
from harness.waiting import async_wait_until


class Queues:
    def __init__(self) -> None:
        self.max: dict[tuple[str, int], int] = {}

    def max_offset(self, topic: str, qid: int) -> int:
        return self.max.get((topic, qid), 0)


async def started(queues: Queues) -> PullRequestHoldService:
    svc = PullRequestHoldService(queues.max_offset)
    await svc.start()
    return svc


async def parked(svc: PullRequestHoldService, n: int) -> None:
    await async_wait_until(lambda: svc.held == n, 5, lambda: f"{n} pulls parked; {svc.held} are")


async def run_ready_callbacks() -> None:
    """Let the loop run what is ready: a notification wakes a held pull synchronously, so a pull it woke by
    mistake has finished after this."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_held_pull_wakes_when_its_queue_passes_the_requested_offset():
    queues = Queues()
    svc = await started(queues)
    held = asyncio.ensure_future(svc.hold("T", 0, 5, 5.0))
    await parked(svc, 1)
    svc.notify("T", 1, 99)  # another queue: no wake
    svc.notify("T", 0, 5)  # not past offset 5 yet
    await run_ready_callbacks()
    assert not held.done()
    svc.notify("T", 0, 6)
    assert await held is True  # woken: a hold that runs out answers False
    assert svc.held == 0
    await svc.stop()


async def test_a_notification_from_another_thread_wakes_the_held_pull():
    queues = Queues()
    svc = await started(queues)
    held = asyncio.ensure_future(svc.hold("T", 0, 0, 5.0))
    await parked(svc, 1)
    threading.Thread(target=svc.notify, args=("T", 0, 1)).start()
    assert await held is True  # woken: a hold that runs out answers False
    await svc.stop()


async def test_a_message_that_landed_before_registration_is_not_missed():
    queues = Queues()
    queues.max[("T", 0)] = 3
    svc = await started(queues)
    assert await svc.hold("T", 0, 2, 5.0) is True
    await svc.stop()


async def test_a_hold_without_news_times_out_and_stop_releases_every_waiter():
    queues = Queues()
    svc = await started(queues)
    assert await svc.hold("T", 0, 0, 0.05) is False
    held = [asyncio.ensure_future(svc.hold("T", q, 0, 30.0)) for q in range(3)]
    await parked(svc, 3)
    await svc.stop()
    assert await asyncio.gather(*held) == [False, False, False]
    assert await svc.hold("T", 0, 0, 1.0) is False  # no new holds while stopping
