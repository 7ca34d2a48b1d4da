"""PopService: ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue on a master
(spec/pop.md, "a faithful but simpler implementation", §9), over the durable pop state.

The parts, each in its own module: the state (``PopState``, state.py) and its journal, the revive topic
(``ReviveLog``, revive_log.py, which also rebuilds the state at start); what happens to held checkpoints as their
time comes (``Reviver``, revive.py: revive, FIFO expiry, auto-renew); the long poll of an empty receive
(``Arrivals``, arrivals.py); receipt handles (receipt.py) and the RPCs that act on one (``HandleRpcs``,
handles.py: ack, change, forward to DLQ). This module answers ReceiveMessage, hands the other RPCs to
``HandleRpcs`` and runs the two background passes.

* **Receive**: the group's pop retry topic (``%RETRY%{group}_{topic}``, 1 queue) first, then the topic's readable
  queues from a random one, until the batch is full. Per (group, topic, queue) one pop at a time (an asyncio
  lock): read from the group's committed offset (the queue's min offset for a new group), write the checkpoint to
  the revive topic and **wait for it to be stored** (flushed and replicated as any message on this broker), only
  then commit the offset past the read and answer. Two consumers of a group therefore never get the same message
  while it is invisible. Empty: long-poll until a message for the topic or its retry topic is dispatched, up to
  ``min(long_polling_timeout, deadline - 1 s)``, then one more read; still empty: MESSAGE_NOT_FOUND.
* **A record the broker cannot give a v2 consumer** (``convert.Unconvertible``: a stored property that is not
  what RocketMQ parses, a time outside protobuf's range; or one that does not decode) is that message's problem,
  never its queue's: it is copied to ``%DLQ%{group}`` (``requeue``, as revive and ForwardMessageToDeadLetterQueue
  do), left out of the checkpoint and passed by the committed offset (a FIFO redelivery is acked), with a
  rate-limited log line; the messages around it are delivered. A DLQ copy the store refuses for good
  (MESSAGE_ILLEGAL) is dropped with that line; any other failure delivers nothing and keeps the offset.
* **Ack, ChangeInvisibleDuration, Forward to DLQ**: by receipt handle, in handles.py.
* **FIFO** (the group's ``consumeMessageOrderly``, spec/pop.md §5): a queue with a batch in flight is skipped
  (``PopState.fifo_blocked``); once that batch's time passed, the next pop of the queue hands its un-acked messages
  out again, attempt + 1, ahead of anything later; the retry topic is not read. The state is the checkpoint records
  themselves (state.py), so it survives a restart and is on the slave; RocketMQ keeps it in an unreplicated file.
* **Auto-renew** (``auto_renew``, which the official PushConsumer sets): the batch is invisible for 60 s and the
  reviver keeps renewing it while the receiving client is known (revive.py).

Pop and pull consumers of one group share the committed offsets of the normal queues: do not mix them in a group.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.filter.consumer_filters import PropertyFilter
from broker.grpc_v2.convert import Unconvertible, to_proto
from broker.grpc_v2.filters import sql_filter
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pop.arrivals import Arrivals
from broker.grpc_v2.pop.handles import MAX_INVISIBLE_MS, HandleRpcs, duration_ms
from broker.grpc_v2.pop.receipt import TOPIC_NORMAL, TOPIC_RETRY, Receipt, pop_retry_topic
from broker.grpc_v2.pop.revive import (
    AUTO_RENEW_INTERVAL_S,
    AUTO_RENEW_INVISIBLE_MS,
    HANDED_ON,
    REVIVE_INTERVAL_S,
    Reviver,
    read_message,
    requeue,
    retry_topic_config,
)
from broker.grpc_v2.pop.revive_log import ReviveLog, clock_ms
from broker.grpc_v2.pop.state import Checkpoint, PopState
from broker.metadata.topics import is_system_topic
from broker.processors import validate
from broker.processors.validate import MAX_INFLATED_FACTOR
from broker.store.types import GetStatus, PutStatus
from common.log import RateLimitedLog
from common.perm import perm_readable
from remoting.message_codec import MessageCodecError, StoredMessage, TagFilter, decode

log = logging.getLogger(__name__)
poison_log = RateLimitedLog(log)
_REFUSED_FOR_GOOD = (PutStatus.MESSAGE_ILLEGAL.value, PutStatus.PROPERTIES_SIZE_EXCEEDED.value)

MAX_BATCH = 32
MIN_INVISIBLE_MS = 10_000


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
    record_filter: PropertyFilter | None = None  # a SQL92 filter, applied to the topic (not to redeliveries)


class PopService:
    def __init__(self, ctx: BrokerContext, metrics: V2Metrics | None = None,
                 client_alive: Callable[[str], bool] | None = None) -> None:
        self.ctx = ctx
        self.metrics = metrics or V2Metrics(None)
        self.state = PopState()
        self.revive_log = ReviveLog(ctx, self.state, self.metrics)
        self.arrivals = Arrivals()
        # MessagingService sets client_alive: a V2Clients lookup
        self.reviver = Reviver(ctx, self.state, self.revive_log, self.arrivals, self.metrics,
                               client_alive or (lambda _cid: False))
        self.handles = HandleRpcs(ctx, self.state, self.revive_log, self.arrivals, self.metrics)
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._task: asyncio.Task | None = None
        self._renew_task: asyncio.Task | None = None
        self._stopping = False

    @property
    def client_alive(self) -> Callable[[str], bool]:
        """Whether a client id is still connected (heartbeat or Telemetry): auto-renew holds its messages while so."""
        return self.reviver.client_alive

    @client_alive.setter
    def client_alive(self, alive: Callable[[str], bool]) -> None:
        self.reviver.client_alive = alive

    # lifecycle ----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.arrivals.start()
        self.ctx.store.add_dispatch_listener(self.arrivals.on_dispatch, confirmed=True)
        self.revive_log.open()
        self._task = asyncio.create_task(self._every(REVIVE_INTERVAL_S, self.reviver.revive_due, "pop revive"),
                                         name="pop-revive")
        self._renew_task = asyncio.create_task(
            self._every(AUTO_RENEW_INTERVAL_S, self.reviver.renew_due, "pop auto-renew"), name="pop-auto-renew")

    async def stop(self) -> None:
        self._stopping = True
        self.arrivals.stop()
        tasks = [t for t in (self._task, self._renew_task) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _every(self, interval_s: float, step: Callable[[int], Awaitable[int]], what: str) -> None:
        """``step(now_ms)`` every ``interval_s`` until stop; a failed pass is logged and the next one runs."""
        while not self._stopping:
            try:
                await step(clock_ms())
            except Exception:
                log.exception("%s pass failed; retrying in %.0f s", what, interval_s)
            await asyncio.sleep(interval_s)

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
            return codes.status(pb.Code.CONSUMER_GROUP_NOT_FOUND,
                                self.ctx.groups.refusal_remark(group, self.ctx.broker_name))
        if not group_cfg.consume_enable:
            return codes.status(pb.Code.FORBIDDEN, f"group {group} has consumeEnable=false; enable it first")
        return cfg, group_cfg

    async def receive(self, req: spb.ReceiveMessageRequest, time_remaining: float | None,
                      client_id: str = "") -> AsyncIterator:
        group, topic = req.group.name, req.message_queue.topic.name
        # the request's own fields first: a bad one must not create the group on demand
        if req.auto_renew:
            invisible_ms = AUTO_RENEW_INVISIBLE_MS  # the asked duration is ignored, as RocketMQ's proxy does
        else:
            invisible_ms = duration_ms(req.invisible_duration) if req.HasField("invisible_duration") else 0
            if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
                yield spb.ReceiveMessageResponse(status=codes.status(
                    pb.Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible_duration {invisible_ms} ms is outside [{MIN_INVISIBLE_MS} ms, 12 h]; ask for one in"
                    " that range"))
                return
        expression = req.filter_expression
        record_filter = None
        if expression.type == pb.FilterType.SQL:
            record_filter = sql_filter(self.ctx, group, topic, expression.expression)
            if isinstance(record_filter, pb.Status):
                yield spb.ReceiveMessageResponse(status=record_filter)
                return
        tag_filter = TagFilter("*" if record_filter is not None else expression.expression or "*")
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
        poll_s = duration_ms(req.long_polling_timeout) / 1000 if req.HasField("long_polling_timeout") else 20.0
        if time_remaining is not None:
            poll_s = min(poll_s, time_remaining - 1.0)
        retry_topic = retry_topic_config(self.ctx, group, topic).topic_name
        how = _Pop(group, topic, batch, invisible_ms, tag_filter, group_cfg.consume_message_orderly,
                   client_id if req.auto_renew else "", record_filter)
        out = await self._pop(how, cfg, retry_topic)
        deadline = asyncio.get_running_loop().time() + poll_s
        while not out and not self._stopping:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            await self.arrivals.wait((topic, retry_topic), left)  # an arrival, or (FIFO) a queue unblocked
            out = await self._pop(how, cfg, retry_topic)
        if not out:
            yield spb.ReceiveMessageResponse(status=codes.status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=codes.OK)
            for message in out:
                yield spb.ReceiveMessageResponse(message=message)
        now = clock_ms()
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

    def _fifo_redeliveries(self, how: _Pop, queue_id: int, count: int):
        """A FIFO queue's expired, un-acked messages to hand out again (at most ``count``, lowest offset first,
        each with its next attempt and the checkpoint holding it), and whether there are more than fit. Messages
        past their last attempt are left to revive, which dead-letters them."""
        group_cfg = self.ctx.groups.get(how.group)
        max_attempts = (group_cfg.retry_max_times if group_cfg is not None else 16) + 1
        records, attempts, holders, more = [], [], [], False
        for offset, attempt, ck in self.state.fifo_redeliveries(how.topic, how.group, queue_id):
            if attempt >= max_attempts:
                continue
            if len(records) >= count:
                more = True
                break
            m = read_message(self.ctx, how.group, how.topic, queue_id, offset)
            if m is not None:  # gone from the store: revive drops it
                records.append(m)
                attempts.append(attempt + 1)
                holders.append(ck)
        return records, attempts, holders, more

    def _decode(self, raws, real_topic: str, queue_id: int) -> list[StoredMessage]:
        """The records of a read; one that does not decode is skipped (the committed offset passes it)."""
        out = []
        for raw in raws:
            try:
                out.append(decode(raw))
            except (MessageCodecError, ValueError, IndexError) as exc:
                poison_log.log(logging.ERROR, "a record of %s queue %d does not decode (%s); skipped for pop"
                               " consumers", real_topic, queue_id, exc)
        return out

    def _convert(self, how: _Pop, m: StoredMessage, attempt: int) -> pb.Message | str:
        """The v2 message of a record (its receipt handle set later), or why it cannot be one."""
        try:
            return to_proto(m, topic=how.topic, receipt_handle="", invisible_ms=how.invisible_ms,
                            store_host=self.ctx.settings.broker.broker_addr, attempt=attempt,
                            max_inflated=MAX_INFLATED_FACTOR * self.ctx.max_message_size)
        except Unconvertible as exc:
            return str(exc)
        except (ValueError, TypeError, OverflowError) as exc:  # protobuf's own range and type checks
            return f"{type(exc).__name__}: {exc}"

    async def _dead_letter(self, how: _Pop, real_topic: str, queue_id: int, m: StoredMessage, why: str,
                           holder: Checkpoint | None) -> bool:
        """Move one record a consumer cannot be given to ``%DLQ%{group}`` (a FIFO redelivery's checkpoint gets its
        ack); False when the store failed for now (nothing is delivered, the offset stays)."""
        st, put_status = await requeue(self.ctx, how.group, how.topic, m, to_dlq=True)
        if st.code in HANDED_ON:
            self.metrics.on_dlq(how.topic, how.group)
            poison_log.log(logging.ERROR, "message %s@%d (%s) of %s cannot be given to v2 consumers: %s; moved to"
                           " %%DLQ%%%s", real_topic, m.queue_offset, m.msg_id, how.group, why, how.group)
        elif put_status in _REFUSED_FOR_GOOD:
            poison_log.log(logging.ERROR, "message %s@%d (%s) of %s cannot be given to v2 consumers: %s; its DLQ copy"
                           " was refused (%s), so it is skipped", real_topic, m.queue_offset, m.msg_id, how.group,
                           why, st.message)
        else:
            poison_log.log(logging.ERROR, "message %s@%d of %s cannot be given to v2 consumers (%s) and its DLQ copy"
                           " failed (%s); retried on the next receive", real_topic, m.queue_offset, how.group, why,
                           st.message)
            return False
        if holder is not None:
            receipt = Receipt(holder.start_offset, holder.pop_time_ms, holder.invisible_ms, TOPIC_NORMAL,
                              self.ctx.broker_name, queue_id, m.queue_offset, m.physical_offset)
            await self.handles.ack_one(how.group, receipt, real_topic)
        return True

    async def _pop_queue(self, how: _Pop, real_topic, queue_id, count, tag_filter, topic_type):
        store, offsets, group = self.ctx.store, self.ctx.offsets, how.group
        lock = self._locks.setdefault((group, real_topic, queue_id), asyncio.Lock())
        async with lock:
            records: list[StoredMessage] = []
            attempts: list[int] = []
            holders: list[Checkpoint | None] = []
            more = False
            if how.fifo:
                if self.state.fifo_blocked(real_topic, group, queue_id, clock_ms()):
                    return []  # the order lock: a batch of this queue is in flight
                records, attempts, holders, more = self._fifo_redeliveries(how, queue_id, count)
            result = None
            if not more and len(records) < count:
                offset = offsets.query(group, real_topic, queue_id)
                if offset is None:
                    offset = store.min_offset_in_queue(real_topic, queue_id)
                result = store.get_message(group, real_topic, queue_id, offset, count - len(records),
                                           tag_filter=tag_filter,
                                           record_filter=how.record_filter if real_topic == how.topic else None,
                                           confirmed_only=True)
                if result.status is GetStatus.FOUND:
                    fresh = self._decode(result.records, real_topic, queue_id)
                    records += fresh
                    attempts += [m.reconsume_times + 1 for m in fresh]
                    holders += [None] * len(fresh)
                else:
                    nxt = result.next_begin_offset
                    if nxt > offset and result.status is not GetStatus.OFFSET_OVERFLOW_BADLY:
                        offsets.commit(group, real_topic, queue_id, nxt)  # filtered away or moved: nothing new
                    result = None
            protos = [self._convert(how, m, a) for m, a in zip(records, attempts)]
            if any(type(p) is str for p in protos):
                kept = []
                for m, a, h, p in zip(records, attempts, holders, protos):
                    if type(p) is not str:
                        kept.append((m, a, p))
                    elif not await self._dead_letter(how, real_topic, queue_id, m, p, h):
                        return []
                records, attempts, protos = [k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept]
                if not records and result is not None:
                    offsets.commit(group, real_topic, queue_id, result.next_begin_offset)
            if not records:
                return []
            start = records[0].queue_offset
            pop_time = clock_ms()
            ck = Checkpoint(real_topic, group, queue_id, start, pop_time, how.invisible_ms,
                            [m.queue_offset - start for m in records], self.ctx.broker_name,
                            fifo=how.fifo, attempts=attempts if how.fifo else [], renew_client=how.renew_client)
            revive_offset = await self.revive_log.append_checkpoint(ck)
            if revive_offset is None:
                return []  # not durable: deliver nothing, the offset stays
            ck.revive_offset = revive_offset
            self.state.add_checkpoint(ck)
            if result is not None:
                offsets.commit(group, real_topic, queue_id, result.next_begin_offset)
        for m, message in zip(records, protos):
            receipt = Receipt(start, pop_time, how.invisible_ms, topic_type, self.ctx.broker_name, queue_id,
                              m.queue_offset, m.physical_offset)
            message.system_properties.receipt_handle = receipt.encode()
        return protos

    # ack / change / DLQ: handles.py ----------------------------------------------------------------------------
    async def ack(self, req: spb.AckMessageRequest) -> spb.AckMessageResponse:
        return await self.handles.ack(req)

    async def change_invisible_duration(self, req: spb.ChangeInvisibleDurationRequest):
        return await self.handles.change_invisible_duration(req)

    async def forward_to_dlq(self, req: spb.ForwardMessageToDeadLetterQueueRequest):
        return await self.handles.forward_to_dlq(req)

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
        return self.revive_log.lag()

    def revive_latency_ms(self, now_ms: int | None = None) -> int:
        oldest = self.state.oldest_revive_time_ms()
        return 0 if oldest is None else max(0, (clock_ms() if now_ms is None else now_ms) - oldest)
