"""Service base: named tasks, periodic runs that survive errors, bounded stop."""

from __future__ import annotations

import asyncio

from common.service import Service


class Ticker(Service):
    def __init__(self) -> None:
        super().__init__("ticker")
        self.ticks = 0
        self.stopped_hook = False

    async def on_start(self) -> None:
        self.run_every("tick", 0.01, self.tick, initial_delay_s=0)

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks == 2:
            raise RuntimeError("one bad run")

    async def on_stop(self) -> None:
        self.stopped_hook = True


async def test_periodic_work_continues_after_a_failing_run():
    svc = Ticker()
    await svc.start()
    for _ in range(200):
        if svc.ticks >= 5:
            break
        await asyncio.sleep(0.01)
    await svc.stop()
    assert svc.ticks >= 5 and svc.stopped_hook and not svc.started


async def test_stop_cancels_a_task_that_ignores_the_stop_event_after_the_timeout():
    svc = Service("stubborn")
    await svc.start()
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    svc.spawn("forever", forever())
    await asyncio.sleep(0)
    await svc.stop(timeout_s=0.05)
    assert cancelled.is_set()


async def test_sleep_returns_early_when_the_service_stops():
    svc = Service("sleeper")
    await svc.start()
    waiter = asyncio.ensure_future(svc.sleep(60))
    await asyncio.sleep(0)
    await svc.stop()
    assert await asyncio.wait_for(waiter, 1) is True
