"""Service base: RocketMQ's ServiceThread in asyncio.

A service owns named background tasks, starts with ``start()`` and stops with ``stop()``: the stop event is set,
``on_stop`` runs, then tasks get ``timeout_s`` to finish before they are cancelled (and named in the log). A
task that dies unexpectedly is logged with its name, so a crashed loop never fails silently. Periodic work uses
``run_every``: an exception in one run is logged and the schedule goes on.

Not thread-safe: use from the event loop that started it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)


class Service:
    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: dict[str, asyncio.Task] = {}
        self._stop_event = asyncio.Event()
        self._started = False

    # lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._stop_event.clear()
        await self.on_start()
        self._started = True

    async def stop(self, timeout_s: float = 5.0) -> None:
        if not self._started:
            return
        self._started = False
        self._stop_event.set()
        try:
            await self.on_stop()
        finally:
            await self._drain_tasks(timeout_s)

    async def on_start(self) -> None:
        """Hook: open resources and spawn tasks."""

    async def on_stop(self) -> None:
        """Hook: runs after the stop event is set, before tasks are awaited."""

    @property
    def started(self) -> bool:
        return self._started

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True at once if the service is stopping.

        ``asyncio.timeout`` rather than ``wait_for``: on Python 3.11 wait_for wraps the wait in a Task, and periodic
        loops (the flush services every few hundred ms) would make one per tick."""
        if self._stop_event.is_set():
            return True
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                await self._stop_event.wait()
            return True
        except TimeoutError:
            return False

    # tasks -------------------------------------------------------------------------------------------------
    def spawn(self, name: str, coro: Awaitable[Any]) -> asyncio.Task:
        full = f"{self.name}.{name}"
        old = self._tasks.get(name)
        if old is not None and not old.done():
            raise RuntimeError(f"task {full} is already running")
        task = asyncio.ensure_future(coro)
        task.set_name(full)
        task.add_done_callback(self._on_task_done)
        self._tasks[name] = task
        return task

    def run_every(
        self,
        name: str,
        interval_s: float,
        fn: Callable[[], Any],
        *,
        initial_delay_s: float | None = None,
    ) -> asyncio.Task:
        """Run ``fn`` (sync or async) every ``interval_s`` until stop; errors are logged, the schedule continues."""

        async def loop() -> None:
            delay = interval_s if initial_delay_s is None else initial_delay_s
            while not await self.sleep(delay):
                try:
                    result = fn()
                    if inspect.isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("%s.%s failed; next run in %.1fs", self.name, name, interval_s)
                delay = interval_s

        return self.spawn(name, loop())

    def _on_task_done(self, task: asyncio.Task) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task %s died: %r", task.get_name(), exc, exc_info=exc)

    async def _drain_tasks(self, timeout_s: float) -> None:
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            done, still = await asyncio.wait(pending, timeout=timeout_s)
            for task in still:
                log.warning("%s: cancelling %s after %.1fs stop timeout", self.name, task.get_name(), timeout_s)
                task.cancel()
            if still:
                await asyncio.wait(still, timeout=1.0)
        self._tasks.clear()
