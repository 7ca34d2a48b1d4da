"""ReviveLog: the pop state's journal, the revive topic ``rmq_sys_REVIVE_LOG_<cluster>`` (1 queue), a system topic
as in RocketMQ: listed, synced to the slaves, readable like any topic.

Every checkpoint (``ck``) and ``ack`` record (state.py) is written here, and a pop or ack is answered only once
its record is stored (flushed and replicated as any message on this broker), so ``PopState`` is always what the
log says and can be rebuilt from it.

**Restart** (``open``): the state is rebuilt by scanning the revive queue from the committed revive offset (group
``CID_RMQ_SYS_REVIVE_GROUP``); each queue's pop offset moves to the end of the last checkpoint read from it. So a
crash, which rolls the flushed consumer offsets back, hands out no message twice: in-flight ones stay invisible
until their time (their handles still ack), acked and revived ones do not come back. A duplicate needs a crash
between a revive's re-put and its ack record.

The revive offset (``commit_offset``) moves to the oldest checkpoint still held, and never while a checkpoint is
being written: a crash must rescan from at or before every checkpoint a pop answered with.

Records written in one event-loop pass (several consumers popping or acking at once) share one append and one
replica wait (``MessageStore.put_grouped``); their order in the queue is the order they were written in (the put
group appends a queue's puts in submission order, and groups one after the other).

Task-safety: event loop only.
"""

from __future__ import annotations

import logging
import time

from broker.context import BrokerContext
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pop.state import TAG_ACK, TAG_CK, Ack, Checkpoint, PopState
from broker.store.types import GetStatus, MessageDraft, PutResult
from common.perm import PERM_RW
from remoting.message_codec import PROPERTY_TAGS, StoredMessage, decode

log = logging.getLogger(__name__)

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
SCAN_BATCH = 32


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def clock_ms() -> int:
    """Wall-clock ms: the clock of pop times, revive times and the records' born times."""
    return int(time.time() * 1000)


class ReviveLog:
    def __init__(self, ctx: BrokerContext, state: PopState, metrics: V2Metrics) -> None:
        self.ctx = ctx
        self.state = state
        self.metrics = metrics
        self.topic = revive_topic(ctx.settings.broker.broker_cluster_name)
        self._ck_writes = 0  # checkpoint records being written: the revive offset must not pass them

    def open(self) -> None:
        """Create the revive topic if absent and rebuild the state from it."""
        _, created = self.ctx.topics.create_if_absent(self.topic, 1, PERM_RW)
        if created:  # a system topic as in RocketMQ: listed, synced to the slaves, readable like any topic
            self.ctx.topics_changed()
        scanned, restored = self._rebuild()
        log.info("pop state rebuilt from %s: %d records, %d checkpoints held, %d pop offsets moved past what the"
                 " last offset flush had", self.topic, scanned, len(self.state), restored)

    def _rebuild(self) -> tuple[int, int]:
        """Scan the revive queue from the committed revive offset: (records scanned, pop offsets restored).

        Consumer offsets reach the disk every flushConsumerOffsetInterval, so after a crash the pop offsets (and the
        revive offset) are those of the last flush. Every pop since then wrote its checkpoint, durably, before it
        answered, and the scan starts at or before it: each queue's pop offset is moved to the end of the last
        checkpoint read from it, so messages handed out before the crash are not handed out again as new ones."""
        offset = self.ctx.offsets.query(REVIVE_GROUP, self.topic, 0)
        if offset is None:
            offset = self.ctx.store.min_offset_in_queue(self.topic, 0)
        end = self.ctx.store.max_offset_in_queue(self.topic, 0)
        scanned = 0
        popped: dict[tuple[str, str, int], int] = {}  # (group, topic read, queue id) -> end of the last pop
        while offset < end:
            result = self.ctx.store.get_message(REVIVE_GROUP, self.topic, 0, offset, SCAN_BATCH)
            if result.status is not GetStatus.FOUND:
                offset = max(result.next_begin_offset, offset + 1)
                continue
            for raw in result.records:
                ck = self._apply(decode(raw))
                if ck is not None and ck.diffs:
                    key = ck.group, ck.topic, ck.queue_id
                    popped[key] = max(popped.get(key, 0), ck.start_offset + max(ck.diffs) + 1)
                scanned += 1
            offset = result.next_begin_offset
        restored = 0
        for (group, topic, queue_id), pop_end in popped.items():
            committed = self.ctx.offsets.query(group, topic, queue_id)
            if committed is None or committed < pop_end:
                self.ctx.offsets.commit(group, topic, queue_id, pop_end)
                restored += 1
        return scanned, restored

    def _apply(self, record: StoredMessage) -> Checkpoint | None:
        """Feed one revive record to the state; the checkpoint when it was one."""
        tag = record.properties.get(PROPERTY_TAGS)
        try:
            if tag == TAG_CK:
                ck = Checkpoint.from_json(record.body)
                ck.revive_offset = record.queue_offset
                self.state.add_checkpoint(ck)
                return ck
            if tag == TAG_ACK:
                self.state.add_ack(Ack.from_json(record.body))
        except (ValueError, KeyError, TypeError) as exc:
            log.error("revive record at %s offset %d is not a pop record (%r); skipped", self.topic,
                      record.queue_offset, exc)
        return None

    async def append(self, tag: str, record: Checkpoint | Ack) -> int | None:
        """Write one revive record; its queue offset, or None when the store refused it."""
        draft = MessageDraft(body=record.to_json(), properties={PROPERTY_TAGS: tag}, born_timestamp=clock_ms(),
                             born_host=self.ctx.store_host)
        put = self.ctx.store.put_grouped(self.topic, 0, draft, wait=True)  # as put_messages: no WAIT property
        result = put if isinstance(put, PutResult) else await put
        self.metrics.on_record(tag, record.topic, record.group, result.status)
        if not result.status.stored:
            log.error("writing a pop %s record failed: %s %s", tag, result.status.value, result.remark)
            return None
        return result.queue_offset  # this record's own

    async def append_checkpoint(self, ck: Checkpoint) -> int | None:
        """``append`` a checkpoint record, counted while it is written (the revive offset must not pass it); its
        offset in the revive queue, None when it could not be stored."""
        self._ck_writes += 1
        try:
            return await self.append(TAG_CK, ck)
        finally:
            self._ck_writes -= 1

    def commit_offset(self) -> None:
        """Move the revive offset to the oldest checkpoint still held (the queue's end when none is), unless a
        checkpoint is being written."""
        if self._ck_writes:
            return
        held = self.state.min_revive_offset()
        commit = held if held is not None else self.ctx.store.max_offset_in_queue(self.topic, 0)
        self.ctx.offsets.commit(REVIVE_GROUP, self.topic, 0, commit)

    def lag(self) -> int:
        """Revive-queue records after the committed revive offset."""
        committed = self.ctx.offsets.query(REVIVE_GROUP, self.topic, 0)
        if committed is None:
            committed = self.ctx.store.min_offset_in_queue(self.topic, 0)
        return max(0, self.ctx.store.max_offset_in_queue(self.topic, 0) - committed)
