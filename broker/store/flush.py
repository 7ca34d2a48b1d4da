"""Commitlog and consume-queue flushing: ASYNC_FLUSH periodic, SYNC_FLUSH group commit.

- ``PeriodicFlushService`` for the commitlog (ASYNC_FLUSH, RocketMQ FlushRealTimeService): every
  ``flushIntervalCommitLog`` ms it fdatasyncs the commitlog when at least ``flushCommitLogLeastPages`` 4 KiB
  pages are dirty, or when
  ``flushCommitLogThoroughInterval`` ms passed since the last thorough flush (then any dirty byte counts).
- ``GroupCommitService`` (SYNC_FLUSH): a put registers ``(next_offset, future)`` and waits. The service
  snapshots the write offset, runs ONE fdatasync in the executor, then completes every waiter whose
  next_offset is covered. Puts arriving during an fdatasync form the next group, so concurrent writers
  share syncs. A waiter not served within ``syncFlushTimeout``, or by the ``deadline`` its caller gave (an
  event-loop time, when that is earlier), gets FLUSH_DISK_TIMEOUT (the data stays).
- ``PeriodicFlushService`` for the consume queues: every ``flushIntervalConsumeQueue`` ms flushes dirty ones with
  the least-pages rule; on a thorough flush it also writes the checkpoint.

The flushed offset only moves after fdatasync returned, so a status of PUT_OK under SYNC_FLUSH means the
bytes are on disk. Task-safety: every method runs on the event loop; fdatasync runs on the disk executor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from broker.config import FlushDiskType, MessageStoreConfig
from broker.store.checkpoint import StoreCheckpoint
from broker.store.commitlog import CommitLog
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.dispatch_state import DispatchState
from broker.store.types import PutStatus
from common.service import Service

log = logging.getLogger(__name__)

PAGE_SIZE = 4096


class PeriodicFlushService(Service):
    """RocketMQ's periodic flush rule, shared by the commitlog (ASYNC_FLUSH) and the consume queues.

    Every ``interval_ms`` it calls ``flush_fn(least_bytes, thorough)``: ``least_bytes`` is the least-pages rule
    (flush only when that many bytes are dirty) and is 0 on a thorough run, which comes once
    ``thorough_interval_ms`` passed since the last one. A failing run is logged and retried next interval.
    """

    def __init__(
        self,
        name: str,
        flush_fn: Callable[[int, bool], Awaitable[object]],
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
    ) -> None:
        super().__init__(name)
        self._flush_fn = flush_fn
        self._interval_s = max(interval_ms, 1) / 1000
        self._least_bytes = max(least_pages, 0) * PAGE_SIZE
        self._thorough_s = thorough_interval_ms / 1000
        self._last_thorough = time.monotonic()

    async def on_start(self) -> None:
        self.spawn("loop", self._loop())

    async def _loop(self) -> None:
        while not await self.sleep(self._interval_s):
            now = time.monotonic()
            thorough = now - self._last_thorough >= self._thorough_s
            if thorough:
                self._last_thorough = now
            try:
                await self._flush_fn(0 if thorough else self._least_bytes, thorough)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: flush failed; retrying in %.3fs", self.name, self._interval_s)


class GroupCommitService(Service):
    """SYNC_FLUSH: one fdatasync serves every waiter it covers.

    ``target_fn()`` returns the current write offset; ``flush_fn(target)`` is a coroutine that makes everything
    below ``target`` durable and returns the flushed offset.
    """

    def __init__(
        self,
        target_fn: Callable[[], int],
        flushed_fn: Callable[[], int],
        flush_fn: Callable[[int], Awaitable[int]],
        *,
        timeout_ms: int,
    ) -> None:
        super().__init__("group-commit")
        self._target_fn = target_fn
        self._flushed_fn = flushed_fn
        self._flush_fn = flush_fn
        self._timeout_s = timeout_ms / 1000
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self.syncs = 0

    async def on_start(self) -> None:
        self.spawn("loop", self._loop())

    async def wait_flushed(self, next_offset: int, deadline: float | None = None) -> tuple[PutStatus, str]:
        if self._flushed_fn() >= next_offset:
            return PutStatus.PUT_OK, ""
        if not self.started:
            return PutStatus.FLUSH_DISK_TIMEOUT, "the store is stopping; the data is written but not yet flushed"
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        # A timer handle rather than wait_for: no Task per waiting put (this runs once per put).
        expire_at = loop.time() + self._timeout_s
        capped = deadline is not None and deadline < expire_at
        timer = loop.call_at(deadline if capped else expire_at, _expire, fut)
        heapq.heappush(self._waiters, (next_offset, next(self._seq), fut))
        self._wakeup.set()
        flushed = await fut
        timer.cancel()
        if not flushed:
            within = "the time the sender's deadline left" if capped else "syncFlushTimeout"
            remark = (
                f"the disk did not confirm the write within {within} (syncFlushTimeout="
                f"{int(self._timeout_s * 1000)} ms); the message is stored but may be lost on power failure"
            )
            return PutStatus.FLUSH_DISK_TIMEOUT, remark
        return PutStatus.PUT_OK, ""

    async def _loop(self) -> None:
        while not self.stopping:
            if not self._waiters:
                # No timeout (and no Task or timer per idle wait): work only comes with a waiter, and every waiter
                # sets the event after it is queued, as on_stop does, so nothing is missed by waiting for it alone.
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            target = self._target_fn()
            try:
                flushed = await self._flush_fn(target)
                self.syncs += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("group commit: fdatasync failed; waiters will time out unless a retry succeeds")
                await self.sleep(0.01)
                continue
            self._complete(flushed)

    def _complete(self, flushed: int) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= flushed:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(True)

    async def on_stop(self) -> None:
        self._wakeup.set()
        # Serve what is written so far once more, so a clean stop answers every waiter it can.
        if self._waiters:
            try:
                self._complete(await self._flush_fn(self._target_fn()))
            except Exception:
                log.exception("group commit: final flush failed")


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(False)  # timed out; the waiter entry is dropped when the flush passes it


def build_flush_services(
    cfg: MessageStoreConfig,
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    state: DispatchState,
    checkpoint: StoreCheckpoint,
    executor: concurrent.futures.Executor,
) -> list[Service]:
    """The flush services for ``cfg.flush_disk_type``, wired to the commitlog, the queues and the checkpoint."""
    master = cfg.broker_role.is_master

    async def flush_commitlog_to(target: int) -> int:
        ts = state.last_put_ts
        loop = asyncio.get_running_loop()
        flushed = await loop.run_in_executor(executor, commitlog.files.flush_sync, target)
        if ts and master:
            checkpoint.physic_msg_timestamp = ts  # a slave records what it dispatched instead
        return flushed

    async def flush_commitlog_least(least_bytes: int, thorough: bool) -> bool:
        target = commitlog.max_offset
        dirty = target - commitlog.flushed_offset
        if dirty <= 0 or (least_bytes and dirty < least_bytes):
            return False
        await flush_commitlog_to(target)
        return True

    async def flush_consume_queues(least_bytes: int, thorough: bool) -> None:
        ts = max(state.last_put_ts, state.last_dispatched_ts)
        dirty = [cq for cq in queues if cq.dirty_bytes() > 0 and cq.dirty_bytes() >= least_bytes]

        def work() -> None:
            for cq in dirty:
                cq.flush_sync()
            if thorough:
                checkpoint.logics_msg_timestamp = max(checkpoint.logics_msg_timestamp, ts)
                checkpoint.flush()

        if dirty or thorough:
            await asyncio.get_running_loop().run_in_executor(executor, work)

    services: list[Service] = []
    if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        services.append(
            GroupCommitService(
                lambda: commitlog.max_offset,
                lambda: commitlog.flushed_offset,
                flush_commitlog_to,
                timeout_ms=cfg.sync_flush_timeout,
            )
        )
    else:
        services.append(
            PeriodicFlushService(
                "commitlog-flush",
                flush_commitlog_least,
                interval_ms=cfg.flush_interval_commit_log,
                least_pages=cfg.flush_commit_log_least_pages,
                thorough_interval_ms=cfg.flush_commit_log_thorough_interval,
            )
        )
    services.append(
        PeriodicFlushService(
            "consumequeue-flush",
            flush_consume_queues,
            interval_ms=cfg.flush_interval_consume_queue,
            least_pages=cfg.flush_consume_queue_least_pages,
            thorough_interval_ms=cfg.flush_consume_queue_thorough_interval,
        )
    )
    return services
