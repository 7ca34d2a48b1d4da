"""The pop RPCs that act on a receipt handle: AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue.

Why a module of its own: these three share one job (check a handle a receive gave out, then close or replace
its message's checkpoint) and nothing of the receive path but the durable pop state, so they read and test apart
from ``service.py``'s queue reads and long polls. ``service.PopService`` owns one ``HandleRpcs`` and hands it the
three RPCs; its FIFO dead-lettering acks through ``ack_one``.

* **Ack**: an ``ack`` record is written to the revive topic, then the offset's bit set. Handles that do not parse,
  are expired, name another broker or no in-flight message answer INVALID_RECEIPT_HANDLE saying which.
* **ChangeInvisibleDuration**: a new one-message checkpoint (pop time now), then the old one acked; the answer
  carries the new handle. 0 ms is allowed (a nack with no backoff: visible again at once).
* **Forward to DLQ**: the message is copied to ``%DLQ%{group}``, then acked.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pop.arrivals import Arrivals
from broker.grpc_v2.pop.receipt import Receipt, parse
from broker.grpc_v2.pop.revive import read_message, requeue
from broker.grpc_v2.pop.revive_log import ReviveLog, clock_ms
from broker.grpc_v2.pop.state import TAG_ACK, Ack, Checkpoint, PopState

MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ's maxInvisibleTimeMills: receives and changes alike


def duration_ms(duration) -> int:
    """A protobuf ``Duration`` in whole milliseconds."""
    return duration.seconds * 1000 + duration.nanos // 1_000_000


class HandleRpcs:
    """Ack, change and forward by receipt handle, over the pop state the ``PopService`` owns. Event loop only."""

    def __init__(self, ctx: BrokerContext, state: PopState, revive_log: ReviveLog, arrivals: Arrivals,
                 metrics: V2Metrics) -> None:
        self.ctx = ctx
        self.state = state
        self.revive_log = revive_log
        self.arrivals = arrivals
        self.metrics = metrics

    def _check(self, group: str, topic: str, handle: str) -> tuple[Receipt, str] | pb.Status:
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
        if max(receipt.expires_at_ms, ck.revive_time_ms if ck is not None else 0) <= clock_ms():
            return codes.status(pb.Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired: the invisible time"
                                " passed and the message will be delivered again; ack within the invisible time")
        if not self.state.in_flight(key, receipt.offset):
            return codes.status(pb.Code.INVALID_RECEIPT_HANDLE, "no in-flight message matches this handle (acked"
                                " already, changed, or not from this group and topic)")
        return receipt, real

    async def ack_one(self, group: str, receipt: Receipt, real: str) -> bool:
        """Ack one message of a checked handle: the ``ack`` record first, then the state; False when the record
        could not be stored (nothing changed)."""
        ack = Ack(real, group, receipt.queue_id, receipt.start_offset, receipt.pop_time_ms, receipt.offset,
                  self.ctx.broker_name)
        if await self.revive_log.append(TAG_ACK, ack) is None:
            return False
        held = self.state.get(ack.key)
        self.state.add_ack(ack)
        if held is not None and held.fifo:
            self.arrivals.wake(real)  # its queue may be unblocked now
        return True

    async def ack(self, req: spb.AckMessageRequest) -> spb.AckMessageResponse:
        group, topic = req.group.name, req.topic.name
        entries = []
        for e in req.entries:
            checked = self._check(group, topic, e.receipt_handle)
            if isinstance(checked, pb.Status):
                st = checked
            elif await self.ack_one(group, *checked):
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
        invisible_ms = duration_ms(req.invisible_duration)
        # RocketMQ's proxy checks a change against [0, maxInvisibleTimeMills] (its 10 s minimum is for receives
        # only): 0 means "visible again now", which a nack with no backoff asks for
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(status=codes.status(
                pb.Code.ILLEGAL_INVISIBLE_TIME, f"invisible_duration {invisible_ms} ms is outside [0 ms, 12 h]; 0"
                " makes the message visible again at once"))
        checked = self._check(group, topic, req.receipt_handle)
        if isinstance(checked, pb.Status):
            return spb.ChangeInvisibleDurationResponse(status=checked)
        old, real = checked
        pop_time = clock_ms()
        held = self.state.get((real, group, old.queue_id, old.start_offset, old.pop_time_ms))
        fifo = held is not None and held.fifo
        ck = Checkpoint(real, group, old.queue_id, old.offset, pop_time, invisible_ms, [0], self.ctx.broker_name,
                        fifo=fifo, attempts=[held.attempt(old.offset)] if fifo else [])
        revive_offset = await self.revive_log.append_checkpoint(ck)
        if revive_offset is None:
            return spb.ChangeInvisibleDurationResponse(status=codes.status(
                pb.Code.INTERNAL_SERVER_ERROR, "the new checkpoint could not be stored; the old handle still holds"))
        ck.revive_offset = revive_offset
        self.state.add_checkpoint(ck)
        await self.ack_one(group, old, real)
        new = Receipt(old.offset, pop_time, invisible_ms, old.topic_type, self.ctx.broker_name, old.queue_id,
                      old.offset, old.commitlog_offset)
        return spb.ChangeInvisibleDurationResponse(status=codes.OK, receipt_handle=new.encode())

    async def forward_to_dlq(self, req: spb.ForwardMessageToDeadLetterQueueRequest):
        group, topic = req.group.name, req.topic.name
        checked = self._check(group, topic, req.receipt_handle)
        if isinstance(checked, pb.Status):
            return spb.ForwardMessageToDeadLetterQueueResponse(status=checked)
        receipt, real = checked
        message = read_message(self.ctx, group, real, receipt.queue_id, receipt.offset)
        if message is None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=codes.status(
                pb.Code.MESSAGE_NOT_FOUND, "the message is no longer in the store"))
        st, _ = await requeue(self.ctx, group, topic, message, to_dlq=True)
        if st.code == pb.Code.OK:
            self.metrics.on_dlq(topic, group)
            await self.ack_one(group, receipt, real)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=st)
