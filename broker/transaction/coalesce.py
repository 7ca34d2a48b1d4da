"""Coalescer: requests that arrive together are served by one call (one store append, one op record), as the put
path groups a batch into one append.

``submit(item)`` queues ``item`` and returns its own result; one drain task at a time takes everything queued (at
most ``max_batch`` items) and passes it to ``handle(items) -> results`` (one result per item, in order). Items
that arrive while a batch is being handled wait for the next one, so the batch grows with the load and a lone
request waits for nothing but one loop turn. The drain runs to its end even when a submitter is cancelled (its
connection closed): a half stored but not in the ledger, or a commit without its op, is the crash the transaction
service's write orders are about, not something a closed socket may cause. ``drained()`` waits for the drain
(the service's stop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    def __init__(self, handle: Callable[[list[T]], Awaitable[Sequence[R]]], *, max_batch: int = 256) -> None:
        self._handle = handle
        self._max_batch = max_batch
        self._queued: list[tuple[T, asyncio.Future[R]]] = []
        self._drain: asyncio.Task | None = None
        self.batches = 0  # drains done (a bench reads items per batch from it)
        self.items = 0

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queued.append((item, future))
        if self._drain is None:
            self._drain = asyncio.ensure_future(self._run())
        return await asyncio.shield(future)

    async def drained(self) -> None:
        if self._drain is not None:
            await asyncio.wait([self._drain])

    async def _run(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued[: self._max_batch], self._queued[self._max_batch :]
                self.batches += 1
                self.items += len(batch)
                try:
                    results = await self._handle([item for item, _ in batch])
                except BaseException as exc:  # every submitter learns it; a cancelled drain cancels them too
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        for _, future in self._queued:
                            future.cancel()
                        self._queued = []
                        raise
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._drain = None
