"""Arrivals: the long poll of a pop that found nothing. The receive waits until a message for one of its topics
(the topic or the group's pop retry topic) is dispatched, or a FIFO queue of it is unblocked (``wake``), up to its
own timeout, then reads once more.

The store's dispatch listener may run on another thread, so ``on_dispatch`` hops onto the loop (and costs one dict
lookup when nobody waits). At most ``MAX_WAITERS`` receives wait at once; past that a receive reads again at once
instead of parking, and ``stop`` releases every waiter, so the gRPC server drains at once.

Task-safety: ``on_dispatch`` from any thread; everything else on the loop that called ``start``.
"""

from __future__ import annotations

import asyncio
import threading

MAX_WAITERS = 100_000


class Arrivals:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._stopping = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def stop(self) -> None:
        self._stopping = True
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(False)

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener."""
        if topic not in self._waiters:
            return
        if threading.get_ident() == self._loop_thread:
            self.wake(topic)
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.wake, topic)

    def wake(self, topic: str) -> None:
        for fut in self._waiters.get(topic, ()):
            if not fut.done():
                fut.set_result(True)

    async def wait(self, topics: tuple[str, ...], timeout_s: float) -> None:
        if timeout_s <= 0 or self._stopping or sum(map(len, self._waiters.values())) >= MAX_WAITERS:
            return
        fut = asyncio.get_running_loop().create_future()
        for t in topics:
            self._waiters.setdefault(t, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            for t in topics:
                waiters = self._waiters.get(t)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[t]
