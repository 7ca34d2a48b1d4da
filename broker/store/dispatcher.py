"""Dispatcher: builds consume-queue units from commitlog records (RocketMQ ReputMessageService).

Used in two places:
- recovery: ``dispatch(begin, end)`` re-dispatches the range the consume queues may lack after a crash;
- on a SLAVE, as a tailing service: every replicated append wakes it, it parses from the dispatched offset
  to the commitlog end and appends units. A record split across two appends is INCOMPLETE: the dispatcher
  stops there and resumes when more bytes arrive. A BLANK record jumps to the next file. An offset below
  the commitlog min (a slave that started copying mid-log) jumps forward to the min.

A master writes its units on the put path and never needs the tailing service.

Parsing is ``dispatch_scan.scan`` (structural checks only, no body CRC: recovery checks CRCs, and replicated
bytes were validated by the master). Units are grouped per queue and written once per queue per round;
``ConsumeQueue.write`` skips units it already has, so re-dispatch is idempotent. After each round the dispatch
listeners get ``(topic, queue_id, max queue offset)``.

A failing round (ENOSPC creating a consume-queue file on a full disk) is retried every second; it is logged at
most once per ``FAILURE_LOG_EVERY_S`` (an OSError as one line, anything else with its traceback), and the round
that succeeds again says how many attempts failed.

Task-safety: event loop only. One dispatch runs at a time (an asyncio.Lock guards recovery vs. the tail task).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.store.commitlog import CommitLog
from broker.store.consume_queue import UNIT, UNIT_SIZE
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.dispatch_scan import ScanResult, scan
from broker.store.dispatch_state import DispatchState
from common.log import RateLimitedLog
from common.service import Service
from remoting.message_codec import BLANK_SIZE, RecordStatus

log = logging.getLogger(__name__)

# One tail round parses about this many bytes (~250 records of 1 KiB, ~0.3 ms) and then yields to the loop, so
# the HA reader's appends and acks never queue behind a long dispatch (8 MiB rounds blocked the slave's loop
# for tens of ms and delayed SYNC_MASTER acks by as much).
ROUND_BYTES = 256 << 10
RECOVERY_CHUNK_BYTES = 64 << 20
RETRY_S = 1.0
FAILURE_LOG_EVERY_S = 60.0


class Dispatcher(Service):
    def __init__(
        self, commitlog: CommitLog, queues: ConsumeQueueStore, state: DispatchState, *, delay_levels_ms: list[int]
    ) -> None:
        super().__init__("dispatcher")
        self._commitlog = commitlog
        self._queues = queues
        self._state = state
        self._delay_levels_ms = delay_levels_ms
        self._wakeup = asyncio.Event()
        self._lock = asyncio.Lock()
        self._corrupt_at = -1
        self._failure_log = RateLimitedLog(log, FAILURE_LOG_EVERY_S)
        self._failed = 0  # attempts failed since the last round that worked
        # the message index's offer_scanned: the records each round parsed, so the index does not parse them again
        self.index_feed: Callable[[int, int, list], None] | None = None

    def wakeup(self) -> None:
        self._wakeup.set()

    async def on_start(self) -> None:
        self.spawn("tail", self._tail())

    async def on_stop(self) -> None:
        self._wakeup.set()

    async def _tail(self) -> None:
        state, commitlog = self._state, self._commitlog
        while not self.stopping:
            self._wakeup.clear()
            progressed = False
            if state.dispatched < commitlog.max_offset:
                try:
                    progressed = await self.dispatch_available()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._on_failure(exc)
                    await self.sleep(RETRY_S)
                    continue
                if self._failed:
                    log.info("dispatch resumed at %d after %d failed attempts", state.dispatched, self._failed)
                    self._failed = 0
            if progressed and state.dispatched < commitlog.max_offset:
                # Yield between rounds: the HA reader shares this loop, and its next append + ack must not
                # wait for a whole catch-up backlog to be dispatched (SYNC_MASTER puts wait on that ack).
                await asyncio.sleep(0)
                continue
            try:
                async with asyncio.timeout(1.0):  # no task per wait, as wait_for would make (one per HA append)
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    async def dispatch_available(self) -> bool:
        """One bounded round (about ROUND_BYTES) from the dispatched offset; True if it moved."""
        begin = self._state.dispatched
        new = await self.dispatch(begin, self._commitlog.max_offset, budget=ROUND_BYTES)
        self._state.advance(new)
        return new > begin

    async def dispatch(self, begin: int, end: int, *, budget: int | None = None) -> int:
        """Dispatch records in [begin, end), stopping at the first record boundary past ``begin + budget``
        bytes (never inside a record); returns the offset dispatching stopped at.

        Without a budget (recovery) the whole range goes in RECOVERY_CHUNK_BYTES steps, so the units held in
        memory stay bounded however large the range is."""
        async with self._lock:
            if budget is not None:
                return await self._dispatch(begin, end, budget)
            offset = begin
            while True:
                new = await self._dispatch(offset, end, RECOVERY_CHUNK_BYTES)
                if new <= offset or new >= end:
                    return new
                offset = new

    async def _dispatch(self, begin: int, end: int, budget: int) -> int:
        commitlog = self._commitlog
        files = commitlog.files
        offset = max(begin, commitlog.min_offset)
        if offset > begin > 0:
            log.info("dispatch jumps from %d to the commitlog min offset %d", begin, offset)
        res = ScanResult()
        start = offset
        index_records: list | None = [] if self.index_feed is not None else None
        left = budget
        while offset < end and left > 0:
            mf = files.find(offset)
            if mf is None:
                break
            base = mf.start_offset
            limit = min(mf.wrote_position, end - base)
            pos = offset - base
            scan(
                mf.mapping,
                pos,
                limit,
                max_size=commitlog.max_record_size,
                delay_ms=self._delay_levels_ms,
                budget=left,
                result=res,
                index_records=index_records,
            )
            left -= res.pos - pos
            if res.pos > pos:
                self._corrupt_at = -1
            pos = res.pos
            status = res.status
            offset = base + pos
            if status is None:
                if pos < mf.file_size:
                    break  # the end, the budget, or the file's written part: the next round goes on
                continue
            if status is RecordStatus.BLANK:
                if offset + res.size != mf.end_offset:
                    self._report_corrupt(offset, "blank record does not reach the file end")
                    break
                offset = mf.end_offset
                continue
            if status is RecordStatus.INCOMPLETE and (limit < mf.file_size or pos + BLANK_SIZE > limit):
                break  # a record split across appends: wait for the rest
            self._report_corrupt(offset, res.reason or status.value)
            break
        if index_records:
            self.index_feed(start, offset, index_records)
        queues, state = self._queues, self._state
        keys: dict = {}
        for topic, qid, first, units, _next in res.units:
            phy, size, _ = UNIT.unpack_from(units, len(units) - UNIT_SIZE)
            await queues.find_or_create(topic, qid).write_units(first, units, phy + size, queues.run_disk)
            keys[(topic, qid)] = None
        if res.last_ts:
            state.on_dispatched(res.last_ts)
        for topic, qid in keys:
            state.notify_dispatch(topic, qid)
        return offset

    def _on_failure(self, exc: Exception) -> None:
        self._failed += 1
        at = self._state.dispatched
        if isinstance(exc, OSError):  # a full or read-only disk: the reason is the whole story
            self._failure_log.log(logging.ERROR, "dispatch at %d failed (%s); retrying every %gs until it works "
                                  "(free space on the store's disk)", at, exc, RETRY_S)
        else:
            self._failure_log.log(logging.ERROR, "dispatch at %d failed; retrying every %gs", at, RETRY_S,
                                  exc_info=True)

    def _report_corrupt(self, offset: int, reason: str) -> None:
        if self._corrupt_at != offset:
            self._corrupt_at = offset
            log.error(
                "commitlog record at %d is corrupt (%s); dispatch is stuck there until the bytes are replaced "
                "(a slave re-syncs from its master)",
                offset,
                reason,
            )
