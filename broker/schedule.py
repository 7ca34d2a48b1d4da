"""Delay levels (RocketMQ ScheduleMessageService, spec §7.2): masters deliver parked messages when they are due.

The store parks a message with ``DELAY = n`` in ``SCHEDULE_TOPIC_XXXX`` queue ``n - 1`` with ``REAL_TOPIC`` and
``REAL_QID`` saved. One task per level reads its queue from the level's offset in ``DelayOffsetManager``. A
message is due at ``storeTimestamp + delay(level)`` (the consume queue's tags code holds the same value); since
every message of a level has the same delay, due messages form a prefix of the queue. The due prefix of a read
batch is re-put in runs of the same (topic, queue), one store append per run, as a copy with DELAY removed and
everything else kept (body, flag, keys, tags, UNIQ_KEY, reconsume times, RETRY_TOPIC). The level's offset moves
past a run only after the store reported it stored, so a crash re-delivers (at least once) and never drops.

Idle levels sleep until their head is due, or until the dispatcher reports a new parked message for their queue,
with a 1 s fallback poll. Offsets are persisted every ``flushDelayOffsetInterval`` and at stop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from broker.metadata.delay_offsets import DelayOffsetManager
from broker.store.types import SCHEDULE_TOPIC, GetStatus, MessageDraft
from common.service import Service
from remoting.headers import INT_MAX, NumberError, parse_int
from remoting.message_codec import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    StoredMessage,
    decode,
)

log = logging.getLogger(__name__)

SCHEDULE_GROUP = "SCHEDULE_SERVICE"
IDLE_POLL_S = 1.0
RETRY_AFTER_FAILURE_S = 1.0
READ_BATCH = 32


def due_prefix(messages: list[StoredMessage], delay_ms: int, now_ms: int) -> tuple[list[StoredMessage], int]:
    """(due messages, ms until the first not-yet-due one, or 0 when all are due)."""
    for index, msg in enumerate(messages):
        wait = msg.store_timestamp + delay_ms - now_ms
        if wait > 0:
            return messages[:index], wait
    return messages, 0


def runs_by_target(messages: list[StoredMessage]) -> list[tuple[str, int, list[StoredMessage]]]:
    """Consecutive messages with the same REAL_TOPIC/REAL_QID, in order (one store append each)."""
    runs: list[tuple[str, int, list[StoredMessage]]] = []
    for msg in messages:
        topic = msg.properties.get(PROPERTY_REAL_TOPIC, "")
        try:
            qid = parse_int(msg.properties.get(PROPERTY_REAL_QUEUE_ID, ""), 0, INT_MAX)
        except NumberError:
            qid = -1  # dropped with an error by the level's task
        if runs and runs[-1][0] == topic and runs[-1][1] == qid:
            runs[-1][2].append(msg)
        else:
            runs.append((topic, qid, [msg]))
    return runs


def redelivery_draft(msg: StoredMessage) -> MessageDraft:
    props = dict(msg.properties)
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    return MessageDraft.stored_again(msg, props, msg.reconsume_times)


class ScheduleService(Service):
    def __init__(
        self, store, delay_offsets: DelayOffsetManager, delay_levels_ms: list[int], *, flush_interval_ms: int
    ) -> None:
        super().__init__("schedule")
        self.store = store
        self.offsets = delay_offsets
        self.levels_ms = list(delay_levels_ms)
        self.flush_interval_s = max(0.1, flush_interval_ms / 1000)
        self._events: dict[int, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self.delivered = 0

    async def on_start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        for level in range(1, len(self.levels_ms) + 1):
            self._events[level] = asyncio.Event()
            self.spawn(f"level-{level}", self._level_loop(level))
        self.run_every("persist", self.flush_interval_s, self.offsets.persist)

    async def on_stop(self) -> None:
        for event in self._events.values():
            event.set()

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: a message was parked in SCHEDULE_TOPIC_XXXX queue ``queue_id``."""
        if topic != SCHEDULE_TOPIC:
            return
        event = self._events.get(queue_id + 1)
        if event is None:
            return
        if threading.get_ident() == self._loop_thread:
            event.set()
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(event.set)

    async def _wait(self, level: int, seconds: float) -> bool:
        """Sleep up to ``seconds`` or until woken; True when stopping."""
        event = self._events[level]
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            pass
        event.clear()
        return self.stopping

    async def _level_loop(self, level: int) -> None:
        queue_id = level - 1
        delay_ms = self.levels_ms[level - 1]
        while not self.stopping:
            try:
                pause_s = await self._deliver_once(level, queue_id, delay_ms)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delay level %d: delivery failed; retrying in %.0fs", level, RETRY_AFTER_FAILURE_S)
                pause_s = RETRY_AFTER_FAILURE_S
            if pause_s > 0 and await self._wait(level, pause_s):
                return

    async def _deliver_once(self, level: int, queue_id: int, delay_ms: int) -> float:
        """Deliver what is due at the head of one level; returns how long to pause (0: go on at once)."""
        store = self.store
        offset = self.offsets.get(level)
        lo = store.min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
        hi = store.max_offset_in_queue(SCHEDULE_TOPIC, queue_id)
        if offset < lo:
            log.warning("delay level %d: offset %d is below the queue's min %d; skipping ahead", level, offset, lo)
            offset = lo
            self.offsets.set(level, offset)
        if offset >= hi:
            return IDLE_POLL_S
        result = store.get_message(SCHEDULE_GROUP, SCHEDULE_TOPIC, queue_id, offset, READ_BATCH)
        if result.status is not GetStatus.FOUND or not result.records:
            if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                self.offsets.set(level, result.next_begin_offset)
                return 0
            return IDLE_POLL_S
        messages = [decode(raw) for raw in result.records]
        due, wait_ms = due_prefix(messages, delay_ms, int(time.time() * 1000))
        if not due:
            return min(wait_ms / 1000, IDLE_POLL_S * 10)
        for topic, qid, run in runs_by_target(due):
            if not topic or qid < 0:
                log.error(
                    "delay level %d: message at %d has no REAL_TOPIC/REAL_QID; dropping it", level, run[0].queue_offset
                )
                self.offsets.set(level, run[-1].queue_offset + 1)
                continue
            put = await store.put_messages(topic, qid, [redelivery_draft(m) for m in run])
            if not put.status.stored:
                log.warning(
                    "delay level %d: re-put of %d messages to %s/%d failed (%s: %s); retrying",
                    level,
                    len(run),
                    topic,
                    qid,
                    put.status.value,
                    put.remark,
                )
                return RETRY_AFTER_FAILURE_S
            self.offsets.set(level, run[-1].queue_offset + 1)
            self.delivered += len(run)
        return 0 if len(due) == len(messages) else min(wait_ms / 1000, IDLE_POLL_S * 10)
