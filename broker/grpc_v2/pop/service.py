"""PopService: ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and revive, on
a master (spec/pop.md, "a faithful but simpler implementation", §9).

* **Receive**: the group's pop retry topic (``%RETRY%{group}_{topic}``, 1 queue) first, then the topic's readable
  queues from a random one, until the batch is full. Per (group, topic, queue) one pop at a time (an asyncio
  lock): read from the group's committed offset (the queue's min offset for a new group), write the checkpoint to
  the revive topic and **wait for it to be stored** (flushed and replicated as any message on this broker), only
  then commit the offset past the read and answer. Two consumers of a group therefore never get the same message
  while it is invisible. Empty: long-poll until a message for the topic or its retry topic is dispatched, up to
  ``min(long_polling_timeout, deadline - 1 s)``, then one more read; still empty: MESSAGE_NOT_FOUND.
* **Ack**: an ``ack`` record is written, then the offset's bit set. Handles that do not parse, are expired, name
  another broker or no in-flight message answer INVALID_RECEIPT_HANDLE saying which.
* **ChangeInvisibleDuration**: a new one-message checkpoint (pop time now), then the old one acked; the answer
  carries the new handle.
* **Revive** (one task): each due checkpoint's un-acked messages are re-put to the pop retry topic with
  reconsumeTimes + 1 (UNIQ_KEY kept, so the message id stays), or to ``%DLQ%{group}`` once that exceeds the group's
  retryMaxTimes, and an ``ack`` record marks each one handed on; then the checkpoint is dropped and the revive
  offset (group ``CID_RMQ_SYS_REVIVE_GROUP``) moves to the oldest checkpoint still held.
* **Restart** (``_rebuild``): the index is rebuilt by scanning the revive queue (the system topic
  ``rmq_sys_REVIVE_LOG_<cluster>``, replicated like any topic) from the committed revive offset; each queue's pop
  offset moves to the end of the last checkpoint read from it. So a crash, which rolls the flushed consumer offsets
  back, hands out no message twice: in-flight ones stay invisible until their time (their handles still ack),
  acked and revived ones do not come back. A duplicate needs a crash between a revive's re-put and its ack record.
* **Forward to DLQ**: the message is copied to ``%DLQ%{group}``, then acked.
* **FIFO** (the group's ``consumeMessageOrderly``, spec/pop.md §5): a queue with a batch in flight is skipped
  (``PopState.fifo_blocked``); once that batch's time passed, the next pop of the queue hands its un-acked messages
  out again, attempt + 1, ahead of anything later; the retry topic is not read and nothing is revived to it. A
  message handed out ``retryMaxTimes`` + 1 times and not acked goes to ``%DLQ%{group}`` at revive time (then
  acked), and the queue moves on. The state is the checkpoint records themselves (state.py), so it survives a
  restart and is on the slave; RocketMQ keeps it in an unreplicated file.
* **Auto-renew** (``auto_renew``, which the official PushConsumer sets): the batch is invisible for 60 s, and while
  the receiving client is known (heartbeat or Telemetry stream) a checkpoint due within 10 s is written again
  with a longer time (1, 3, 5, 10, 30 min steps, as RocketMQ's proxy), up to ``AUTO_RENEW_MAX_MS`` after the pop;
  the handle the client holds stays valid, since the checkpoint keeps its key.

Pop and pull consumers of one group share the committed offsets of the normal queues: do not mix them in a group.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.grpc_v2.convert import to_proto
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pop.receipt import TOPIC_NORMAL, TOPIC_RETRY, Receipt, parse, pop_retry_topic
from broker.grpc_v2.pop.state import TAG_ACK, TAG_CK, Ack, Checkpoint, PopState
from broker.metadata.topics import is_system_topic
from broker.processors import validate
from broker.store.types import GetStatus, MessageDraft
from common.metrics import label_value
from common.perm import PERM_RW, perm_readable
from remoting.message_codec import PROPERTY_RETRY_TOPIC, PROPERTY_TAGS, StoredMessage, TagFilter, decode

log = logging.getLogger(__name__)

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
MAX_BATCH = 32
MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS = 60_000  # RocketMQ's proxy: defaultInvisibleTimeMills
AUTO_RENEW_AHEAD_MS = 10_000  # renew a checkpoint due within this (proxy: renewAheadTimeMillis)
AUTO_RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000)  # by renewal count, then the last
AUTO_RENEW_MAX_MS = 3 * 3600 * 1000  # no renewal past 3 h after the pop (proxy: renewMaxTimeMillis)
AUTO_RENEW_INTERVAL_S = 5.0
REVIVE_INTERVAL_S = 1.0
SCAN_BATCH = 32
MAX_WAITERS = 100_000


@dataclass(frozen=True)
class _Pop:
    """One receive's parameters, shared by the reads of its queues."""

    group: str
    topic: str
    batch: int
    invisible_ms: int
    tag_filter: TagFilter | None
    fifo: bool
    renew_client: str  # the client id of an auto_renew receive, else ""


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ms(duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


class PopService:
    def __init__(self, ctx: BrokerContext, metrics: V2Metrics | None = None,
                 client_alive: Callable[[str], bool] | None = None) -> None:
        self.ctx = ctx
        self.client_alive = client_alive or (lambda _cid: False)  # MessagingService sets it: a V2Clients lookup
        self.metrics = metrics or V2Metrics(None)
        self.state = PopState()
        self.revive_topic = revive_topic(ctx.settings.broker.broker_cluster_name)
        self.revived = self.dead_lettered = 0
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._waiters: dict[str, set[asyncio.Future]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._task: asyncio.Task | None = None
        self._renew_task: asyncio.Task | None = None
        self._stopping = False
        self._ck_writes = 0  # checkpoint records being written: the revive offset must not pass them
        self._fifo_woken: set = set()  # due FIFO checkpoints whose queue's waiters were woken

    # lifecycle ----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.ctx.store.add_dispatch_listener(self._on_dispatch)
        _, created = self.ctx.topics.create_if_absent(self.revive_topic, 1, PERM_RW)
        if created:  # a system topic as in RocketMQ: listed, synced to the slaves, readable like any topic
            self.ctx.topics_changed()
        scanned, restored = self._rebuild()
        log.info("pop state rebuilt from %s: %d records, %d checkpoints held, %d pop offsets moved past what the"
                 " last offset flush had", self.revive_topic, scanned, len(self.state), restored)
        self._task = asyncio.create_task(self._every(REVIVE_INTERVAL_S, self.revive_due, "pop revive"),
                                         name="pop-revive")
        self._renew_task = asyncio.create_task(self._every(AUTO_RENEW_INTERVAL_S, self.renew_due, "pop auto-renew"),
                                               name="pop-auto-renew")

    async def stop(self) -> None:
        self._stopping = True
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(False)
        tasks = [t for t in (self._task, self._renew_task) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _rebuild(self) -> tuple[int, int]:
        """Scan the revive queue from the committed revive offset: (records scanned, pop offsets restored).

        Consumer offsets reach the disk every flushConsumerOffsetInterval, so after a crash the pop offsets (and the
        revive offset) are those of the last flush. Every pop since then wrote its checkpoint, durably, before it
        answered, and the scan starts at or before it: each queue's pop offset is moved to the end of the last
        checkpoint read from it, so messages handed out before the crash are not handed out again as new ones."""
        offset = self.ctx.offsets.query(REVIVE_GROUP, self.revive_topic, 0)
        if offset is None:
            offset = self.ctx.store.min_offset_in_queue(self.revive_topic, 0)
        end = self.ctx.store.max_offset_in_queue(self.revive_topic, 0)
        scanned = 0
        popped: dict[tuple[str, str, int], int] = {}  # (group, topic read, queue id) -> end of the last pop
        while offset < end:
            result = self.ctx.store.get_message(REVIVE_GROUP, self.revive_topic, 0, offset, SCAN_BATCH)
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
            log.error("revive record at %s offset %d is not a pop record (%r); skipped", self.revive_topic,
                      record.queue_offset, exc)
        return None

    async def _append(self, tag: str, record: Checkpoint | Ack) -> int | None:
        """Write one revive record; its queue offset, or None when the store refused it."""
        draft = MessageDraft(body=record.to_json(), properties={PROPERTY_TAGS: tag}, born_timestamp=_now_ms(),
                             born_host=self.ctx.store_host)
        result = await self.ctx.store.put_messages(self.revive_topic, 0, [draft])
        self.metrics.on_record(tag, record.topic, record.group, result.status)
        if not result.status.stored:
            log.error("writing a pop %s record failed: %s %s", tag, result.status.value, result.remark)
            return None
        return result.queue_offset

    # arrivals (long polling) --------------------------------------------------------------------------------
    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic not in self._waiters:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(topic)
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, topic)

    def _wake(self, topic: str) -> None:
        for fut in self._waiters.get(topic, ()):
            if not fut.done():
                fut.set_result(True)

    async def _wait_arrival(self, topics: tuple[str, ...], timeout_s: float) -> None:
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

    # receive ------------------------------------------------------------------------------------------------
    def _admit(self, group: str, topic: str):
        bad = validate.group_name(group)
        if bad:
            return codes.status(pb.Code.ILLEGAL_CONSUMER_GROUP, bad.remark)
        bad = validate.topic_name(topic)
        if bad or is_system_topic(topic):
            return codes.status(pb.Code.ILLEGAL_TOPIC, bad.remark if bad else f"{topic} is a system topic")
        cfg = self.ctx.topics.get(topic)
        if cfg is None:
            return codes.status(pb.Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist on broker"
                                f" {self.ctx.broker_name}; create it (mqctl updateTopic -t {topic})")
        if not perm_readable(cfg.perm):
            return codes.status(pb.Code.FORBIDDEN, f"topic {topic} is not readable")
        group_cfg = self.ctx.groups.get(group)
        if group_cfg is None:
            group_cfg = self.ctx.groups.find_or_create(group)
            if group_cfg is not None:
                self.ctx.groups_changed()
        if group_cfg is None:
            return codes.status(pb.Code.CONSUMER_GROUP_NOT_FOUND, f"group {group} does not exist and"
                                f" autoCreateSubscriptionGroup=false; create it (mqctl updateSubGroup -g {group})")
        if not group_cfg.consume_enable:
            return codes.status(pb.Code.FORBIDDEN, f"group {group} has consumeEnable=false; enable it first")
        return cfg, group_cfg

    def _retry_config(self, group: str, topic: str):
        name = pop_retry_topic(group, topic)
        cfg, created = self.ctx.topics.create_if_absent(name, 1, PERM_RW)
        if created:
            self.ctx.topics_changed()
        return cfg

    async def receive(self, req: spb.ReceiveMessageRequest, time_remaining: float | None,
                      client_id: str = "") -> AsyncIterator:
        group, topic = req.group.name, req.message_queue.topic.name
        # the request's own fields first: a bad one must not create the group on demand
        if req.auto_renew:
            invisible_ms = AUTO_RENEW_INVISIBLE_MS  # the asked duration is ignored, as RocketMQ's proxy does
        else:
            invisible_ms = _ms(req.invisible_duration) if req.HasField("invisible_duration") else 0
            if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
                yield spb.ReceiveMessageResponse(status=codes.status(
                    pb.Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible_duration {invisible_ms} ms is outside [{MIN_INVISIBLE_MS} ms, 12 h]; ask for one in"
                    " that range"))
                return
        expression = req.filter_expression
        if expression.type == pb.FilterType.SQL:
            yield spb.ReceiveMessageResponse(status=codes.status(
                pb.Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not supported by pyrmq; filter by tag"))
            return
        tag_filter = TagFilter(expression.expression or "*")
        if not tag_filter.match_all and not tag_filter.tags:
            yield spb.ReceiveMessageResponse(status=codes.status(
                pb.Code.ILLEGAL_FILTER_EXPRESSION, f"filter {expression.expression!r} names no tag; use '*' or"
                " 'tagA || tagB'"))
            return
        admitted = self._admit(group, topic)
        if isinstance(admitted, pb.Status):
            yield spb.ReceiveMessageResponse(status=admitted)
            return
        cfg, group_cfg = admitted
        batch = max(1, min(req.batch_size or MAX_BATCH, MAX_BATCH))
        poll_s = _ms(req.long_polling_timeout) / 1000 if req.HasField("long_polling_timeout") else 20.0
        if time_remaining is not None:
            poll_s = min(poll_s, time_remaining - 1.0)
        retry_topic = self._retry_config(group, topic).topic_name
        how = _Pop(group, topic, batch, invisible_ms, tag_filter, group_cfg.consume_message_orderly,
                   client_id if req.auto_renew else "")
        out = await self._pop(how, cfg, retry_topic)
        deadline = asyncio.get_running_loop().time() + poll_s
        while not out and not self._stopping:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            await self._wait_arrival((topic, retry_topic), left)  # an arrival, or (FIFO) a queue unblocked
            out = await self._pop(how, cfg, retry_topic)
        if not out:
            yield spb.ReceiveMessageResponse(status=codes.status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=codes.OK)
            for message in out:
                yield spb.ReceiveMessageResponse(message=message)
        now = _now_ms()
        yield spb.ReceiveMessageResponse(delivery_timestamp=Timestamp(seconds=now // 1000,
                                                                      nanos=(now % 1000) * 1_000_000))

    async def _pop(self, how: _Pop, cfg, retry_topic: str) -> list[pb.Message]:
        out: list[pb.Message] = []
        if not how.fifo:  # FIFO redelivers in place: the retry topic is RocketMQ's non-FIFO path only
            out += await self._pop_queue(how, retry_topic, 0, how.batch, None, TOPIC_RETRY)
        n = cfg.read_queue_nums
        start = random.randrange(n) if n else 0
        for i in range(n):
            if len(out) >= how.batch:
                break
            out += await self._pop_queue(how, how.topic, (start + i) % n, how.batch - len(out), how.tag_filter,
                                         TOPIC_NORMAL)
        if out:
            self.ctx.stats.get.add(len(out))
            self.metrics.on_delivered(how.topic, how.group, len(out), sum(len(m.body) for m in out))
        return out

    def _fifo_redeliveries(self, how: _Pop, queue_id: int, count: int) -> tuple[list[StoredMessage], list[int], bool]:
        """A FIFO queue's expired, un-acked messages to hand out again (at most ``count``, lowest offset first,
        each with its next attempt), and whether there are more than fit. Messages past their last attempt are
        left to revive, which dead-letters them."""
        group_cfg = self.ctx.groups.get(how.group)
        max_attempts = (group_cfg.retry_max_times if group_cfg is not None else 16) + 1
        records, attempts, more = [], [], False
        for offset, attempt, _ck in self.state.fifo_redeliveries(how.topic, how.group, queue_id):
            if attempt >= max_attempts:
                continue
            if len(records) >= count:
                more = True
                break
            m = self._read(how.group, how.topic, queue_id, offset)
            if m is not None:  # gone from the store: revive drops it
                records.append(m)
                attempts.append(attempt + 1)
        return records, attempts, more

    async def _pop_queue(self, how: _Pop, real_topic, queue_id, count, tag_filter, topic_type):
        store, offsets, group = self.ctx.store, self.ctx.offsets, how.group
        lock = self._locks.setdefault((group, real_topic, queue_id), asyncio.Lock())
        async with lock:
            records: list[StoredMessage] = []
            attempts: list[int] = []
            more = False
            if how.fifo:
                if self.state.fifo_blocked(real_topic, group, queue_id, _now_ms()):
                    return []  # the order lock: a batch of this queue is in flight
                records, attempts, more = self._fifo_redeliveries(how, queue_id, count)
            result = None
            if not more and len(records) < count:
                offset = offsets.query(group, real_topic, queue_id)
                if offset is None:
                    offset = store.min_offset_in_queue(real_topic, queue_id)
                result = store.get_message(group, real_topic, queue_id, offset, count - len(records),
                                           tag_filter=tag_filter)
                if result.status is GetStatus.FOUND:
                    fresh = [decode(raw) for raw in result.records]
                    records += fresh
                    attempts += [m.reconsume_times + 1 for m in fresh]
                else:
                    nxt = result.next_begin_offset
                    if nxt > offset and result.status is not GetStatus.OFFSET_OVERFLOW_BADLY:
                        offsets.commit(group, real_topic, queue_id, nxt)  # filtered away or moved: nothing new
                    result = None
            if not records:
                return []
            start = records[0].queue_offset
            pop_time = _now_ms()
            ck = Checkpoint(real_topic, group, queue_id, start, pop_time, how.invisible_ms,
                            [m.queue_offset - start for m in records], self.ctx.broker_name,
                            fifo=how.fifo, attempts=attempts if how.fifo else [], renew_client=how.renew_client)
            revive_offset = await self._append_checkpoint(ck)
            if revive_offset is None:
                return []  # not durable: deliver nothing, the offset stays
            ck.revive_offset = revive_offset
            self.state.add_checkpoint(ck)
            if result is not None:
                offsets.commit(group, real_topic, queue_id, result.next_begin_offset)
        out = []
        for m, attempt in zip(records, attempts):
            receipt = Receipt(start, pop_time, how.invisible_ms, topic_type, self.ctx.broker_name, queue_id,
                              m.queue_offset, m.physical_offset)
            out.append(to_proto(m, topic=how.topic, receipt_handle=receipt.encode(), invisible_ms=how.invisible_ms,
                                store_host=self.ctx.settings.broker.broker_addr, attempt=attempt))
        return out

    # ack / change / DLQ -------------------------------------------------------------------------------------
    def _check_handle(self, group: str, topic: str, handle: str) -> tuple[Receipt, str] | pb.Status:
        try:
            receipt = parse(handle)
        except ValueError as exc:
            return codes.status(pb.Code.INVALID_RECEIPT_HANDLE, f"{exc}; pass the handle a receive returned")
        if receipt.broker_name != self.ctx.broker_name:
            return codes.status(pb.Code.INVALID_RECEIPT_HANDLE, f"the handle is from broker {receipt.broker_name},"
                                f" this is {self.ctx.broker_name}; ack on the broker the message came from")
        real = receipt.real_topic(group, topic)
        key = (real, group, receipt.queue_id, receipt.start_offset, receipt.pop_time_ms)
        ck = self.state.get(key)
        # the checkpoint's time, not the handle's: an auto-renewed checkpoint outlives the handle's own duration
        if max(receipt.expires_at_ms, ck.revive_time_ms if ck is not None else 0) <= _now_ms():
            return codes.status(pb.Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired: the invisible time"
                                " passed and the message will be delivered again; ack within the invisible time")
        if not self.state.in_flight(key, receipt.offset):
            return codes.status(pb.Code.INVALID_RECEIPT_HANDLE, "no in-flight message matches this handle (acked"
                                " already, changed, or not from this group and topic)")
        return receipt, real

    async def _ack(self, group: str, receipt: Receipt, real: str) -> bool:
        ack = Ack(real, group, receipt.queue_id, receipt.start_offset, receipt.pop_time_ms, receipt.offset,
                  self.ctx.broker_name)
        if await self._append(TAG_ACK, ack) is None:
            return False
        held = self.state.get(ack.key)
        self.state.add_ack(ack)
        if held is not None and held.fifo:
            self._wake(real)  # its queue may be unblocked now
        return True

    async def ack(self, req: spb.AckMessageRequest) -> spb.AckMessageResponse:
        group, topic = req.group.name, req.topic.name
        entries = []
        for e in req.entries:
            checked = self._check_handle(group, topic, e.receipt_handle)
            if isinstance(checked, pb.Status):
                st = checked
            elif await self._ack(group, *checked):
                st = codes.OK
            else:
                st = codes.status(pb.Code.INTERNAL_SERVER_ERROR, "the ack could not be stored; retry the ack")
            entries.append(spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                     status=st))
        codes_seen = {e.status.code for e in entries}
        if len(codes_seen) == 1:
            top = entries[0].status if entries else codes.OK
        else:
            top = codes.status(pb.Code.MULTIPLE_RESULTS, "entries differ; see each entry's status")
        return spb.AckMessageResponse(status=top, entries=entries)

    async def change_invisible_duration(self, req: spb.ChangeInvisibleDurationRequest):
        group, topic = req.group.name, req.topic.name
        invisible_ms = _ms(req.invisible_duration)
        # RocketMQ's proxy checks a change against [0, maxInvisibleTimeMills] (its 10 s minimum is for receives
        # only): 0 means "visible again now", which a nack with no backoff asks for
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(status=codes.status(
                pb.Code.ILLEGAL_INVISIBLE_TIME, f"invisible_duration {invisible_ms} ms is outside [0 ms, 12 h]; 0"
                " makes the message visible again at once"))
        checked = self._check_handle(group, topic, req.receipt_handle)
        if isinstance(checked, pb.Status):
            return spb.ChangeInvisibleDurationResponse(status=checked)
        old, real = checked
        pop_time = _now_ms()
        held = self.state.get((real, group, old.queue_id, old.start_offset, old.pop_time_ms))
        fifo = held is not None and held.fifo
        ck = Checkpoint(real, group, old.queue_id, old.offset, pop_time, invisible_ms, [0], self.ctx.broker_name,
                        fifo=fifo, attempts=[held.attempt(old.offset)] if fifo else [])
        revive_offset = await self._append_checkpoint(ck)
        if revive_offset is None:
            return spb.ChangeInvisibleDurationResponse(status=codes.status(
                pb.Code.INTERNAL_SERVER_ERROR, "the new checkpoint could not be stored; the old handle still holds"))
        ck.revive_offset = revive_offset
        self.state.add_checkpoint(ck)
        await self._ack(group, old, real)
        new = Receipt(old.offset, pop_time, invisible_ms, old.topic_type, self.ctx.broker_name, old.queue_id,
                      old.offset, old.commitlog_offset)
        return spb.ChangeInvisibleDurationResponse(status=codes.OK, receipt_handle=new.encode())

    async def forward_to_dlq(self, req: spb.ForwardMessageToDeadLetterQueueRequest):
        group, topic = req.group.name, req.topic.name
        checked = self._check_handle(group, topic, req.receipt_handle)
        if isinstance(checked, pb.Status):
            return spb.ForwardMessageToDeadLetterQueueResponse(status=checked)
        receipt, real = checked
        message = self._read(group, real, receipt.queue_id, receipt.offset)
        if message is None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=codes.status(
                pb.Code.MESSAGE_NOT_FOUND, "the message is no longer in the store"))
        st, _ = await self._repub(group, topic, message, to_dlq=True)
        if st.code == pb.Code.OK:
            self.metrics.on_dlq(topic, group)
            await self._ack(group, receipt, real)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=st)

    # observability ------------------------------------------------------------------------------------------
    def _subscribed(self, topic: str, group: str) -> tuple[str, bool]:
        """The subscribed topic of a topic read, and whether it was the group's pop retry topic."""
        original = topic.removeprefix(pop_retry_topic(group, ""))
        return original, original != topic

    def inflight_by_topic(self) -> dict[tuple[str, str, bool], int]:
        """(subscribed topic, group, is_retry) -> messages received and neither acked nor revived."""
        out: dict[tuple[str, str, bool], int] = {}
        for (topic, group), n in self.state.in_flight_by_topic().items():
            original, is_retry = self._subscribed(topic, group)
            key = (original, group, is_retry)
            out[key] = out.get(key, 0) + n
        return out

    def queue_progress(self, group: str) -> dict[tuple[str, int], tuple[int, int]]:
        """For GET_CONSUME_STATS: (topic as stored, queue id) -> (lowest offset in flight, messages in flight)."""
        return self.state.in_flight_queues(group)

    def revive_lag(self) -> int:
        committed = self.ctx.offsets.query(REVIVE_GROUP, self.revive_topic, 0)
        if committed is None:
            committed = self.ctx.store.min_offset_in_queue(self.revive_topic, 0)
        return max(0, self.ctx.store.max_offset_in_queue(self.revive_topic, 0) - committed)

    def revive_latency_ms(self, now_ms: int | None = None) -> int:
        oldest = self.state.oldest_revive_time_ms()
        return 0 if oldest is None else max(0, (_now_ms() if now_ms is None else now_ms) - oldest)

    # revive -------------------------------------------------------------------------------------------------
    def _read(self, group: str, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        result = self.ctx.store.get_message(group, topic, queue_id, offset, 1)
        if result.status is not GetStatus.FOUND:
            return None
        m = decode(result.records[0])
        return m if m.queue_offset == offset else None

    async def _repub(self, group: str, topic: str, m: StoredMessage, *, to_dlq: bool,
                     reconsume: int | None = None) -> tuple[pb.Status, str]:
        """Copy ``m`` to the group's pop retry topic (reconsumeTimes + 1) or its DLQ (``reconsume`` or its
        reconsumeTimes): the v2 status and the store's put status."""
        props = dict(m.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, topic)
        if to_dlq:
            cfg, created = self.ctx.topics.create_dlq_topic(group)
            if created:
                self.ctx.topics_changed()
            target, reconsume = cfg.topic_name, m.reconsume_times if reconsume is None else reconsume
        else:
            target, reconsume = self._retry_config(group, topic).topic_name, m.reconsume_times + 1
        draft = MessageDraft(body=m.body, properties=props, flag=m.flag, born_timestamp=m.born_timestamp,
                             born_host=m.born_host, reconsume_times=reconsume, sys_flag=m.sys_flag)
        result = await self.ctx.store.put_messages(target, 0, [draft])
        return codes.put_status(result.status, result.remark), label_value(result.status)

    async def _append_checkpoint(self, ck: Checkpoint) -> int | None:
        """``_append`` a checkpoint record, counted in ``_ck_writes`` while it is written (the revive offset must
        not pass it); its offset in the revive queue, None when it could not be stored."""
        self._ck_writes += 1
        try:
            return await self._append(TAG_CK, ck)
        finally:
            self._ck_writes -= 1

    async def _every(self, interval_s: float, step: Callable[[int], Awaitable[int]], what: str) -> None:
        """``step(now_ms)`` every ``interval_s`` until stop; a failed pass is logged and the next one runs."""
        while not self._stopping:
            try:
                await step(_now_ms())
            except Exception:
                log.exception("%s pass failed; retrying in %.0f s", what, interval_s)
            await asyncio.sleep(interval_s)

    async def _expire_fifo(self, ck: Checkpoint, original: str, max_times: int) -> int:
        """A due FIFO checkpoint stays held: its queue's next pop redelivers it. Here only what must not come back
        leaves it: messages gone from the store, and those handed out max_times + 1 times, which go to the DLQ.
        The queue's waiters are woken: it is no longer blocked. The number dead-lettered."""
        if ck.key not in self._fifo_woken:
            self._fifo_woken.add(ck.key)
            self._wake(original)
        count = 0
        for offset in ck.unacked():
            attempt = ck.attempt(offset)
            m = None
            if attempt > max_times:
                m = self._read(ck.group, ck.topic, ck.queue_id, offset)
                if m is not None:
                    st, _ = await self._repub(ck.group, original, m, to_dlq=True, reconsume=attempt - 1)
                    if st.code not in (pb.Code.OK, pb.Code.SLAVE_PERSISTENCE_TIMEOUT, pb.Code.HA_NOT_AVAILABLE,
                                       pb.Code.MASTER_PERSISTENCE_TIMEOUT):
                        log.error("moving FIFO message %s@%d of %s to its DLQ failed: %s; retried next pass",
                                  ck.topic, offset, ck.group, st.message)
                        continue
                    count += 1
                    self.dead_lettered += 1
                    self.metrics.on_dlq(original, ck.group)
                    log.info("FIFO message %s@%d of group %s moved to %%DLQ%%%s after %d deliveries", ck.topic,
                             offset, ck.group, ck.group, attempt)
            elif self._read(ck.group, ck.topic, ck.queue_id, offset) is not None:
                continue  # redelivered by the next pop of its queue
            ack = Ack(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time_ms, offset, ck.broker_name)
            if await self._append(TAG_ACK, ack) is not None:
                self.state.add_ack(ack)
        return count

    async def renew_due(self, now_ms: int) -> int:
        """Extend the auto_renew checkpoints due within AUTO_RENEW_AHEAD_MS whose client is still known: the
        same checkpoint (same key, so the client's handles stay valid) written again with revive time now + the
        next step, never past AUTO_RENEW_MAX_MS after the pop. The number renewed."""
        renewed = 0
        for ck in self.state.renewable(now_ms, AUTO_RENEW_AHEAD_MS):
            limit = ck.pop_time_ms + AUTO_RENEW_MAX_MS
            if not self.client_alive(ck.renew_client) or ck.revive_time_ms >= limit:
                ck.renew_client = ""  # not renewed again: it expires and is delivered again as any other
                continue
            step = AUTO_RENEW_STEPS_MS[min(ck.renewals, len(AUTO_RENEW_STEPS_MS) - 1)]
            invisible_ms = min(now_ms + step, limit) - ck.pop_time_ms
            again = Checkpoint(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time_ms, invisible_ms,
                               ck.diffs, ck.broker_name, fifo=ck.fifo, attempts=ck.attempts)
            if await self._append_checkpoint(again) is None:
                continue  # retried next pass while there is time
            ck.invisible_ms, ck.renewals = invisible_ms, ck.renewals + 1
            renewed += 1
        return renewed

    async def revive_due(self, now_ms: int) -> int:
        """Re-put the un-acked messages of every due checkpoint; the number of messages revived."""
        count = 0
        for ck in self.state.due(now_ms):
            original = ck.topic
            prefix = f"%RETRY%{ck.group}_"
            original = original.removeprefix(prefix)
            group_cfg = self.ctx.groups.get(ck.group)
            max_times = group_cfg.retry_max_times if group_cfg is not None else 16
            if ck.fifo and group_cfg is not None and group_cfg.consume_message_orderly:
                count += await self._expire_fifo(ck, original, max_times)
                continue
            ok = True
            for offset in ck.unacked():
                m = self._read(ck.group, ck.topic, ck.queue_id, offset)
                if m is None:
                    continue  # expired from the store: nothing to deliver again
                to_dlq = m.reconsume_times + 1 > max_times
                st, put_status = await self._repub(ck.group, original, m, to_dlq=to_dlq)
                if not to_dlq:
                    self.metrics.on_revive(ck.topic, ck.group, put_status)
                if st.code not in (pb.Code.OK, pb.Code.SLAVE_PERSISTENCE_TIMEOUT, pb.Code.HA_NOT_AVAILABLE,
                                   pb.Code.MASTER_PERSISTENCE_TIMEOUT):
                    log.error("revive of %s@%d for %s failed: %s; retried next pass", ck.topic, offset, ck.group,
                              st.message)
                    ok = False
                    break
                ck.acked.add(offset)  # handed on: never re-put twice by this process
                # nor after a crash, which rolls the revive offset back to its last flush and rescans from there
                await self._append(TAG_ACK, Ack(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time_ms,
                                                offset, ck.broker_name))
                count += 1
                if to_dlq:
                    self.dead_lettered += 1
                    self.metrics.on_dlq(original, ck.group)
                    log.info("message %s@%d of group %s moved to %%DLQ%%%s after %d deliveries", ck.topic, offset,
                             ck.group, ck.group, m.reconsume_times + 1)
                else:
                    self.revived += 1
            if ok:
                self.state.remove(ck)
        self._fifo_woken = {k for k in self._fifo_woken if self.state.get(k) is not None}
        if (count or not len(self.state)) and not self._ck_writes:
            held = self.state.min_revive_offset()
            commit = held if held is not None else self.ctx.store.max_offset_in_queue(self.revive_topic, 0)
            self.ctx.offsets.commit(REVIVE_GROUP, self.revive_topic, 0, commit)
        return count
