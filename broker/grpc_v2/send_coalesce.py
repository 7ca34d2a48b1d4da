"""SendCoalescer: concurrent SendMessage calls to one queue that arrive together become one store append.

Why: the official clients send one message per SendMessage call; with many calls in flight (``send_async``) gRPC
hands the loop several calls in one turn. Appending each alone pays the put path (prepare, append, dispatch and
index wakeups, and on a SYNC_MASTER a replica wait) once per message; appending them together pays it once per turn,
as the SDK's batched send does.

While no put of this coalescer is waiting in the store (an ASYNC_MASTER with ASYNC_FLUSH answers every put
without waiting), a call appends at once: an extra loop turn costs a lone call more than the append it could save
(``bench.grpc_v2_handler_bench``: 75 against 40 µs per call), and grpc.aio hands the loop about one call per turn
even with 64 in flight (about 10 % of them joined a batch). While a put waits (a SYNC_MASTER's replica wait, a
SYNC_FLUSH), calls queue up: the first call for a key opens a batch and yields one loop turn
(``asyncio.sleep(0)``), every call the loop runs in that turn joins it, then the batch is appended with
``MessageStore.put_messages`` (one record per message, consecutive queue offsets) and every member gets the
shared result and its index in the batch. Members are awaited through futures; the append runs in the opener's
coroutine when it is alone and in a task otherwise, so a cancelled opener (its client gave up) never strands
the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft, PutResult

MAX_BATCH = 256  # a batch this long is closed: the next call opens a new one


class SendCoalescer:
    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._open: dict[Hashable, list] = {}  # key -> [topic, queue_id, drafts, futures]
        self.appends = 0  # store appends made (for the benchmark's appends-per-call ratio)
        self.waiting = 0  # puts in the store that have not returned (a replica or flush wait)

    async def put(self, key: Hashable, topic: str, queue_id: int, draft: MessageDraft) -> tuple[PutResult, int]:
        """Append ``draft`` (to the opener's ``topic``/``queue_id`` when it joins a batch): (result, index)."""
        batch = self._open.get(key)
        if batch is None and not self.waiting:
            return await self._put_now(topic, queue_id, [draft]), 0
        if batch is not None:
            drafts, futures = batch[2], batch[3]
            fut = asyncio.get_running_loop().create_future()
            drafts.append(draft)
            futures.append(fut)
            if len(drafts) >= MAX_BATCH:
                del self._open[key]
            return await fut
        batch = self._open[key] = [topic, queue_id, [draft], [None]]
        try:
            await asyncio.sleep(0)  # the calls the loop runs in this turn join
        except asyncio.CancelledError:
            if self._open.get(key) is batch:
                del self._open[key]
            if len(batch[2]) > 1:  # the others still get their append
                asyncio.ensure_future(self._append(topic, queue_id, batch[2][1:], batch[3][1:]))
            raise
        if self._open.get(key) is batch:
            del self._open[key]
        drafts, futures = batch[2], batch[3]
        if len(drafts) == 1:
            return await self._put_now(topic, queue_id, drafts), 0
        own = futures[0] = asyncio.get_running_loop().create_future()
        asyncio.ensure_future(self._append(topic, queue_id, drafts, futures))
        return await own

    async def _put_now(self, topic: str, queue_id: int, drafts: list[MessageDraft]) -> PutResult:
        self.appends += 1
        self.waiting += 1
        try:
            return await self.store.put_messages(topic, queue_id, drafts)
        finally:
            self.waiting -= 1

    async def _append(self, topic: str, queue_id: int, drafts: list[MessageDraft], futures: list) -> None:
        try:
            result = await self._put_now(topic, queue_id, drafts)
        except BaseException as exc:
            for fut in futures:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for i, fut in enumerate(futures):
            if not fut.done():  # a member whose client gave up was cancelled
                fut.set_result((result, i))
