"""PullRequestHoldService: parks pulls that found nothing until a message arrives or the hold expires.

RocketMQ re-checks held pulls every 5 s and is woken by the dispatcher for the (topic, queue) it just wrote
(spec §5.2 step 5). Here each held pull is an ``asyncio.Future`` in a list keyed by (topic, queue id). The
store's dispatch listener calls ``notify(topic, queue_id, new_max_queue_offset)``, which resolves every waiter
whose requested offset is now below the queue's max; it may run on another thread, so it hops onto the loop
with ``call_soon_threadsafe`` (and costs one dict lookup when nobody waits). A periodic re-check every 5 s covers
a missed notification, and ``stop()`` releases every waiter so the gRPC server drains at once.

Bounded: at most ``max_held`` pulls are parked; beyond that a pull is answered at once (the client polls again).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from common.service import Service

log = logging.getLogger(__name__)

RECHECK_INTERVAL_S = 5.0
MAX_HELD = 100_000

Key = tuple[str, int]


class PullRequestHoldService(Service):
    def __init__(
        self,
        max_offset: Callable[[str, int], int],
        *,
        recheck_interval_s: float = RECHECK_INTERVAL_S,
        max_held: int = MAX_HELD,
    ) -> None:
        super().__init__("pull-hold")
        self._max_offset = max_offset
        self.recheck_interval_s = recheck_interval_s
        self.max_held = max_held
        self._waiters: dict[Key, list[tuple[int, asyncio.Future]]] = {}
        self._held = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    async def on_start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.run_every("recheck", self.recheck_interval_s, self.recheck)

    async def on_stop(self) -> None:
        for waiters in self._waiters.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(False)

    @property
    def held(self) -> int:
        return self._held

    async def hold(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Wait until the queue's max offset passes ``offset`` (True) or ``timeout_s`` runs out (False)."""
        if self.stopping or self._held >= self.max_held or timeout_s <= 0:
            return False
        key = (topic, queue_id)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = (offset, fut)
        self._waiters.setdefault(key, []).append(entry)
        self._held += 1
        try:
            # A message may have landed between the caller's read and this registration.
            if self._max_offset(topic, queue_id) > offset:
                return True
            try:
                async with asyncio.timeout(timeout_s):
                    return await fut
            except TimeoutError:
                return False
        finally:
            self._held -= 1
            waiters = self._waiters.get(key)
            if waiters is not None:
                try:
                    waiters.remove(entry)
                except ValueError:
                    pass
                if not waiters:
                    del self._waiters[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: new messages up to ``max_offset`` (exclusive) in (topic, queue_id)."""
        if (topic, queue_id) not in self._waiters:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake((topic, queue_id), max_offset)
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, (topic, queue_id), max_offset)

    def _wake(self, key: Key, max_offset: int) -> None:
        for offset, fut in self._waiters.get(key, ()):
            if offset < max_offset and not fut.done():
                fut.set_result(True)

    def recheck(self) -> None:
        for key in list(self._waiters):
            try:
                self._wake(key, self._max_offset(*key))
            except Exception:
                log.exception("re-check of held pulls for %s failed", key)
