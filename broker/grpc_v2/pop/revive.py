"""Revive and auto-renew: what happens to held checkpoints as their time comes (spec/pop.md §9).

* **Revive** (``revive_due``): each due checkpoint's un-acked messages are re-put to the pop retry topic with
  reconsumeTimes + 1 (UNIQ_KEY kept, so the message id stays), or to ``%DLQ%{group}`` once that exceeds the group's
  retryMaxTimes, and an ``ack`` record marks each one handed on; then the checkpoint is dropped and the revive
  offset moves to the oldest checkpoint still held.
* **FIFO** (the group's ``consumeMessageOrderly``): a due checkpoint stays held, since its queue's next pop hands
  its un-acked messages out again; only a message handed out ``retryMaxTimes`` + 1 times and not acked leaves it,
  to ``%DLQ%{group}`` (then acked), and the queue moves on. Nothing is revived to the retry topic.
* **Auto-renew** (``renew_due``, for receives with ``auto_renew``, which the official PushConsumer sets): while the
  receiving client is known (heartbeat or Telemetry stream) a checkpoint due within 10 s is written again with a
  longer time (1, 3, 5, 10, 30 min steps, as RocketMQ's proxy), up to ``AUTO_RENEW_MAX_MS`` after the pop; the
  handle the client holds stays valid, since the checkpoint keeps its key.

``read_message``, ``requeue`` and ``retry_topic_config`` are the store work revive shares with the receive and
DLQ paths of the service. Task-safety: event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pop.arrivals import Arrivals
from broker.grpc_v2.pop.receipt import pop_retry_topic
from broker.grpc_v2.pop.revive_log import ReviveLog
from broker.grpc_v2.pop.state import TAG_ACK, Ack, Checkpoint, PopState
from broker.store.types import GetStatus, MessageDraft
from common.metrics import label_value
from common.perm import PERM_RW
from remoting.message_codec import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_RETRY_TOPIC, StoredMessage, decode

log = logging.getLogger(__name__)

REVIVE_INTERVAL_S = 1.0
AUTO_RENEW_INVISIBLE_MS = 60_000  # RocketMQ's proxy: defaultInvisibleTimeMills
AUTO_RENEW_AHEAD_MS = 10_000  # renew a checkpoint due within this (proxy: renewAheadTimeMillis)
AUTO_RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000)  # by renewal count, then the last
AUTO_RENEW_MAX_MS = 3 * 3600 * 1000  # no renewal past 3 h after the pop (proxy: renewMaxTimeMillis)
AUTO_RENEW_INTERVAL_S = 5.0
# put outcomes after which the message counts as handed on: stored here, only the replica or the flush is late
HANDED_ON = (pb.Code.OK, pb.Code.SLAVE_PERSISTENCE_TIMEOUT, pb.Code.HA_NOT_AVAILABLE,
             pb.Code.MASTER_PERSISTENCE_TIMEOUT)


def retry_topic_config(ctx: BrokerContext, group: str, topic: str):
    """The group's pop retry topic for ``topic`` (1 queue), created on first use."""
    name = pop_retry_topic(group, topic)
    cfg, created = ctx.topics.create_if_absent(name, 1, PERM_RW)
    if created:
        ctx.topics_changed()
    return cfg


def read_message(ctx: BrokerContext, group: str, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
    """The message at ``offset``, None when the store no longer has it."""
    result = ctx.store.get_message(group, topic, queue_id, offset, 1)
    if result.status is not GetStatus.FOUND:
        return None
    m = decode(result.records[0])
    return m if m.queue_offset == offset else None


async def requeue(ctx: BrokerContext, group: str, topic: str, m: StoredMessage, *, to_dlq: bool,
                  reconsume: int | None = None) -> tuple[pb.Status, str]:
    """Copy ``m`` to the group's pop retry topic (reconsumeTimes + 1) or its DLQ (``reconsume`` or its
    reconsumeTimes): the v2 status and the store's put status."""
    props = dict(m.properties)
    props.setdefault(PROPERTY_RETRY_TOPIC, topic)
    if to_dlq:
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)  # a dead letter waits for no level (a bad one is refused)
        cfg, created = ctx.topics.create_dlq_topic(group)
        if created:
            ctx.topics_changed()
        target, reconsume = cfg.topic_name, m.reconsume_times if reconsume is None else reconsume
    else:
        target, reconsume = retry_topic_config(ctx, group, topic).topic_name, m.reconsume_times + 1
    result = await ctx.store.put_messages(target, 0, [MessageDraft.stored_again(m, props, reconsume)])
    return codes.put_status(result.status, result.remark), label_value(result.status)


class Reviver:
    def __init__(self, ctx: BrokerContext, state: PopState, revive_log: ReviveLog, arrivals: Arrivals,
                 metrics: V2Metrics, client_alive: Callable[[str], bool]) -> None:
        self.ctx = ctx
        self.state = state
        self.revive_log = revive_log
        self.arrivals = arrivals
        self.metrics = metrics
        self.client_alive = client_alive
        self.revived = self.dead_lettered = 0
        self._fifo_woken: set = set()  # due FIFO checkpoints whose queue's waiters were woken

    async def _expire_fifo(self, ck: Checkpoint, original: str, max_times: int) -> int:
        """A due FIFO checkpoint stays held: its queue's next pop redelivers it. Here only what must not come back
        leaves it: messages gone from the store, and those handed out max_times + 1 times, which go to the DLQ.
        The queue's waiters are woken: it is no longer blocked. The number dead-lettered."""
        if ck.key not in self._fifo_woken:
            self._fifo_woken.add(ck.key)
            self.arrivals.wake(original)
        count = 0
        for offset in ck.unacked():
            attempt = ck.attempt(offset)
            m = None
            if attempt > max_times:
                m = read_message(self.ctx, ck.group, ck.topic, ck.queue_id, offset)
                if m is not None:
                    st, _ = await requeue(self.ctx, ck.group, original, m, to_dlq=True, reconsume=attempt - 1)
                    if st.code not in HANDED_ON:
                        log.error("moving FIFO message %s@%d of %s to its DLQ failed: %s; retried next pass",
                                  ck.topic, offset, ck.group, st.message)
                        continue
                    count += 1
                    self.dead_lettered += 1
                    self.metrics.on_dlq(original, ck.group)
                    log.info("FIFO message %s@%d of group %s moved to %%DLQ%%%s after %d deliveries", ck.topic,
                             offset, ck.group, ck.group, attempt)
            elif read_message(self.ctx, ck.group, ck.topic, ck.queue_id, offset) is not None:
                continue  # redelivered by the next pop of its queue
            ack = Ack(ck.topic, ck.group, ck.queue_id, ck.start_offset, ck.pop_time_ms, offset, ck.broker_name)
            if await self.revive_log.append(TAG_ACK, ack) is not None:
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
            if await self.revive_log.append_checkpoint(again) is None:
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
                m = read_message(self.ctx, ck.group, ck.topic, ck.queue_id, offset)
                if m is None:
                    continue  # expired from the store: nothing to deliver again
                to_dlq = m.reconsume_times + 1 > max_times
                st, put_status = await requeue(self.ctx, ck.group, original, m, to_dlq=to_dlq)
                if not to_dlq:
                    self.metrics.on_revive(ck.topic, ck.group, put_status)
                if st.code not in HANDED_ON:
                    log.error("revive of %s@%d for %s failed: %s; retried next pass", ck.topic, offset, ck.group,
                              st.message)
                    ok = False
                    break
                ck.acked.add(offset)  # handed on: never re-put twice by this process
                # nor after a crash, which rolls the revive offset back to its last flush and rescans from there
                await self.revive_log.append(TAG_ACK, Ack(ck.topic, ck.group, ck.queue_id, ck.start_offset,
                                                          ck.pop_time_ms, offset, ck.broker_name))
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
        if count or not len(self.state):
            self.revive_log.commit_offset()
        return count
