"""Dispatcher: builds consume-queue units from commitlog records (RocketMQ ReputMessageService).

Used in two places:
- recovery: ``dispatch(begin, end)`` re-dispatches the range the consume queues may lack after a crash;
- on a SLAVE, as a tailing service: every replicated append wakes it, it parses from the dispatched offset
  to the commitlog end and appends units. A record split across two appends is INCOMPLETE: the dispatcher
  stops there and resumes when more bytes arrive. A BLANK record jumps to the next file. An offset below
  the commitlog min (a slave that started copying mid-log) jumps forward to the min.

A master writes its units on the put path and never needs the tailing service.

Units are grouped per queue and written once per queue per round; ``ConsumeQueue.write`` skips units it
already has, so re-dispatch is idempotent. After each round the dispatch listeners get
``(topic, queue_id, max queue offset)``.

Task-safety: event loop only. One dispatch runs at a time (an asyncio.Lock guards recovery vs. the tail task).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker.store.consume_queue import UNIT
from broker.store.put import TX_MASK, TX_NOT_DISPATCHED, tags_hash, write_units
from broker.store.record import BLANK_SIZE, RecordStatus, check_record, property_value
from broker.store.types import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TAGS, SCHEDULE_TOPIC
from common.service import Service

if TYPE_CHECKING:
    from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

_MAX_ROUND_BYTES = 8 << 20  # bound one round so the loop stays responsive while catching up


class Dispatcher(Service):
    def __init__(self, store: MessageStore) -> None:
        super().__init__("dispatcher")
        self._store = store
        self._wakeup = asyncio.Event()
        self._lock = asyncio.Lock()
        self._corrupt_at = -1

    def wakeup(self) -> None:
        self._wakeup.set()

    async def on_start(self) -> None:
        self.spawn("tail", self._tail())

    async def on_stop(self) -> None:
        self._wakeup.set()

    async def _tail(self) -> None:
        store = self._store
        while not self.stopping:
            self._wakeup.clear()
            progressed = False
            if store.dispatched_phy_offset < store.max_phy_offset:
                try:
                    progressed = await self.dispatch_available()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("dispatch failed at %d; retrying in 1s", store.dispatched_phy_offset)
                    await self.sleep(1.0)
                    continue
            if progressed and store.dispatched_phy_offset < store.max_phy_offset:
                continue
            try:
                await asyncio.wait_for(self._wakeup.wait(), 1.0)
            except TimeoutError:
                pass

    async def dispatch_available(self) -> bool:
        """One bounded round from the dispatched offset; True if it moved."""
        store = self._store
        begin = store.dispatched_phy_offset
        end = min(store.max_phy_offset, max(begin, store.min_phy_offset) + _MAX_ROUND_BYTES)
        new = await self.dispatch(begin, end)
        store._set_dispatched(new)
        return new > begin

    async def dispatch(self, begin: int, end: int) -> int:
        """Dispatch records in [begin, end); returns the offset dispatching stopped at."""
        async with self._lock:
            return await self._dispatch(begin, end)

    async def _dispatch(self, begin: int, end: int) -> int:
        store = self._store
        commitlog = store._commitlog
        files = commitlog.files
        delay_ms = store._delay_levels_ms
        max_level = len(delay_ms)
        offset = max(begin, commitlog.min_offset)
        if offset > begin > 0:
            log.info("dispatch jumps from %d to the commitlog min offset %d", begin, offset)
        pending: dict = {}
        last_ts = 0
        while offset < end:
            mf = files.find(offset)
            if mf is None:
                break
            limit = min(mf.wrote_position, end - mf.start_offset)
            buf = mf.buffer[:limit]
            pos = offset - mf.start_offset
            base = mf.start_offset
            stop = False
            while pos < limit:
                res = check_record(buf, pos, max_size=commitlog.max_record_size)
                status = res.status
                if status is RecordStatus.VALID:
                    info = res.info
                    if (info.sys_flag & TX_MASK) not in TX_NOT_DISPATCHED:
                        if info.topic == SCHEDULE_TOPIC:
                            level = int(property_value(info.properties, PROPERTY_DELAY_TIME_LEVEL) or 0)
                            level = min(max(level, 1), max_level)
                            code = info.store_timestamp + delay_ms[level - 1]
                        else:
                            tags = property_value(info.properties, PROPERTY_TAGS)
                            code = tags_hash(tags) if tags else 0
                        key = (info.topic, info.queue_id)
                        item = pending.get(key)
                        if item is not None and item[0] + len(item[1]) // 20 != info.queue_offset:
                            await self._write(key, item)
                            item = None
                        if item is None:
                            item = pending[key] = [info.queue_offset, bytearray(), 0]
                        item[1] += UNIT.pack(info.physical_offset, info.size, code)
                        item[2] = info.physical_offset + info.size
                    last_ts = info.store_timestamp
                    pos += res.size
                    self._corrupt_at = -1
                elif status is RecordStatus.BLANK:
                    if base + pos + res.size != mf.end_offset:
                        self._report_corrupt(base + pos, "blank record does not reach the file end")
                        stop = True
                        break
                    pos = mf.file_size
                    break
                elif status is RecordStatus.INCOMPLETE and (limit < mf.file_size or pos + BLANK_SIZE > limit):
                    stop = True  # a record split across appends: wait for the rest
                    break
                else:
                    self._report_corrupt(base + pos, res.reason or status.value)
                    stop = True
                    break
            offset = base + pos
            if stop or pos < mf.file_size:
                break
        for key, item in pending.items():
            await self._write(key, item)
        if last_ts:
            store._on_dispatched(last_ts)
        for key in pending:
            store._notify_dispatch(key[0], key[1])
        return offset

    async def _write(self, key, item) -> None:
        cq = self._store._cq(key[0], key[1], create=True)
        await write_units(cq, item[0], item[1], item[2], self._store._create_cq_file)

    def _report_corrupt(self, offset: int, reason: str) -> None:
        if self._corrupt_at != offset:
            self._corrupt_at = offset
            log.error(
                "commitlog record at %d is corrupt (%s); dispatch is stuck there until the bytes are replaced "
                "(a slave re-syncs from its master)",
                offset,
                reason,
            )
