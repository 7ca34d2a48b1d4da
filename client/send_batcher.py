"""The producer's batches as one state machine: which batch a send joins, when a batch seals, and when a sealed
batch may go out. Pure: no I/O, no event loop, no clock of its own; the producer (client/producer.py) feeds it
sends and answers and is told, through three hooks, what to do.

A batch (``client.send_batch.SendBatch``) moves through named states (``BatchState``):

- OPEN: the topic's one batch that takes sends, bound to one queue. The producer schedules its ``due`` (the end of
  the event-loop iteration, or ``linger_ms``) through ``schedule_due`` when it opens.
- HELD: due but below its cap while its lane (topic on its broker) has ``pipeline_depth`` requests in flight
  (``client.batch_policy``); it still takes sends, and seals when it fills or when its lane answers a request
  (``release_held``, which the producer runs one loop iteration after ``finished`` says so, so that the senders
  that answer just completed can join first).
- WAITING: sealed while its queue already runs ``max_inflight_per_queue`` requests; it goes out, in seal order,
  when one of them finishes.
- IN_FLIGHT: handed to the one sender (``send``), which runs its request and retries and then calls
  ``finished``.
- DONE: answered, failed, or abandoned at stop.

A batch seals when a send does not fit it (a delayed message goes alone; WAIT differs), when it holds its cap or
``max_batch_bytes``, when it is due and not held, or at ``seal_all``. ``on_seal`` lets the producer count it and
account its bytes to the topic's sticky queue (``client.queue_choice``). Not thread-safe: event loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from client.batch_policy import BatchPolicy
from client.message import MessageQueue
from client.send_batch import BatchState, SendBatch

TAKING = (BatchState.OPEN, BatchState.HELD)

Lane = tuple[str, str]  # (broker name, topic): where held batches wait for an answer (``client.batch_policy``)


def lane_of(batch: SendBatch) -> Lane:
    return batch.mq.broker_name, batch.mq.topic


class QueueSlot:
    """One queue's requests in flight and the sealed batches waiting for their turn."""

    __slots__ = ("inflight", "waiting")

    def __init__(self) -> None:
        self.inflight = 0
        self.waiting: deque[SendBatch] = deque()


class SendBatcher:
    __slots__ = ("_held", "_on_seal", "_open", "_pick_queue", "_schedule_due", "_send", "_slots", "clock",
                 "max_batch_bytes", "max_inflight_per_queue", "policy", "send_timeout_s")

    def __init__(
        self,
        policy: BatchPolicy,
        *,
        max_batch_bytes: int,
        max_inflight_per_queue: int,
        send_timeout_s: float,
        pick_queue: Callable[[str], MessageQueue],
        send: Callable[[SendBatch], None],
        schedule_due: Callable[[SendBatch], None],
        on_seal: Callable[[SendBatch], None],
        clock: Callable[[], float],
    ) -> None:
        self.policy = policy
        self.max_batch_bytes = max_batch_bytes
        self.max_inflight_per_queue = max(1, max_inflight_per_queue)
        self.send_timeout_s = send_timeout_s
        self.clock = clock
        self._pick_queue = pick_queue  # a new batch's queue; raises (MQClientError) when the topic has none
        self._send = send  # the one sender: runs an IN_FLIGHT batch's request, then calls finished()
        self._schedule_due = schedule_due  # call due(batch) once its linger is over
        self._on_seal = on_seal
        self._open: dict[str, SendBatch] = {}  # topic -> its OPEN or HELD batch
        self._held: dict[Lane, list[SendBatch]] = {}  # lane -> batches HELD on it (some sealed since)
        self._slots: dict[MessageQueue, QueueSlot] = {}

    # sends ------------------------------------------------------------------------------------------------
    def add(self, topic: str, entry: tuple[int, bytes, bytes], msg_id: str, fut: asyncio.Future, *, wait: bool,
            solo: bool) -> SendBatch:
        """Put one send (``entry`` = flag, body, properties) in the topic's open batch, opening one when there is
        none or it does not fit; the batch it joined. What ``pick_queue`` raises leaves the send out."""
        batch = self._open.get(topic)
        if batch is not None and (solo or batch.wait is not wait):
            self.seal(batch)
            batch = None
        if batch is None:
            mq = self._pick_queue(topic)
            batch = SendBatch(mq, self.clock() + self.send_timeout_s, self.policy.cap(), wait)
            self._open[topic] = batch
            self._schedule_due(batch)
        batch.entries.append(entry)
        batch.ids.append(msg_id)
        batch.futures.append(fut)
        batch.nbytes += len(entry[1])
        if solo or len(batch.futures) >= batch.cap or batch.nbytes >= self.max_batch_bytes:
            self.seal(batch)
        return batch

    def due(self, batch: SendBatch) -> bool:
        """The batch's linger is over: seal it, or hold it (True) while its lane has ``depth`` requests out."""
        if batch.state is not BatchState.OPEN:
            return False  # sealed by size already
        lane = lane_of(batch)
        if self.policy.hold(lane, len(batch.futures), batch.cap):
            batch.state = BatchState.HELD
            self._held.setdefault(lane, []).append(batch)
            return True
        self.seal(batch)
        return False

    def seal(self, batch: SendBatch) -> None:
        """OPEN or HELD -> IN_FLIGHT (its queue has a free request slot) or WAITING; anything else: nothing."""
        if self._open.get(batch.mq.topic) is batch:
            del self._open[batch.mq.topic]
        if batch.state not in TAKING:
            return
        if not batch.futures:
            batch.state = BatchState.DONE
            return
        self._on_seal(batch)
        self.policy.sealed(len(batch.futures))
        slot = self._slots.get(batch.mq)
        if slot is None:
            slot = self._slots[batch.mq] = QueueSlot()
        if slot.inflight < self.max_inflight_per_queue:
            self._dispatch(slot, batch)
        else:
            batch.state = BatchState.WAITING
            slot.waiting.append(batch)

    def _dispatch(self, slot: QueueSlot, batch: SendBatch) -> None:
        slot.inflight += 1
        self.policy.sent(lane_of(batch))
        batch.state = BatchState.IN_FLIGHT
        self._send(batch)

    # answers ----------------------------------------------------------------------------------------------
    def finished(self, batch: SendBatch) -> bool:
        """The sender is done with an IN_FLIGHT batch (answered or failed): its queue's next WAITING batch goes
        out. True when batches are HELD on its lane: the caller runs ``release_held(lane_of(batch))`` soon after."""
        slot = self._slots[batch.mq]
        lane = lane_of(batch)
        batch.state = BatchState.DONE
        slot.inflight -= 1
        self.policy.answered(lane)
        self.policy.finished(len(batch.futures))
        if slot.waiting and slot.inflight < self.max_inflight_per_queue:
            self._dispatch(slot, slot.waiting.popleft())
        return lane in self._held

    def release_held(self, lane: Lane) -> None:
        """Seal every batch held on ``lane`` (one of its requests was answered)."""
        for batch in self._held.pop(lane, ()):
            self.seal(batch)

    # queries and stop -------------------------------------------------------------------------------------
    def in_flight(self, mq: MessageQueue) -> int:
        slot = self._slots.get(mq)
        return 0 if slot is None else slot.inflight

    def open_batch(self, topic: str) -> SendBatch | None:
        return self._open.get(topic)

    def seal_all(self) -> None:
        """Seal every OPEN or HELD batch (the producer stops)."""
        for batch in list(self._open.values()):
            self.seal(batch)

    def abandon(self) -> list[SendBatch]:
        """Forget every HELD and WAITING batch (the producer stopped and gave up on them): they are DONE, the
        caller fails their sends."""
        self._held.clear()
        out: list[SendBatch] = []
        for slot in self._slots.values():
            while slot.waiting:
                batch = slot.waiting.popleft()
                batch.state = BatchState.DONE
                out.append(batch)
        return out
