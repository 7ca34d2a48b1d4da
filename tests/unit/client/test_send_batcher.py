"""client.send_batcher against a simple model (issue 22 item 13): a Hypothesis state machine adds sends, fires dues
in any order, answers requests, releases held batches, stops; after every step the batcher's batches, their
states, what it handed to the sender (and in which order) and the per-queue slots must equal the model's.

The model is the producer's batching rules written as plainly as possible: one open batch per topic; a delayed
(solo) send or one with another WAIT seals it; a batch seals at its cap or max_batch_bytes, when due unless held
(below its cap while its lane, its topic on its broker, has ``depth`` requests out), or when its lane answers
while it is held; a sealed batch goes to the sender while its queue has fewer than ``max_inflight_per_queue`` requests, else waits in seal
order. Caps come from a second BatchPolicy fed the calls the model expects, so the batcher's calls to its policy
are checked too."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from client.batch_policy import BatchPolicy
from client.errors import NoRouteError
from client.message import MessageQueue
from client.send_batch import BatchState, SendBatch
from client.send_batcher import SendBatcher

TOPICS = ["A", "B"]
NO_ROUTE = "C"  # a topic whose queue pick always fails
# A has one queue (its requests pile up: WAITING), B two on two brokers; both share broker b1 (HELD)
QUEUES = {"A": [MessageQueue("A", "b1", 0)], "B": [MessageQueue("B", "b1", 1), MessageQueue("B", "b2", 0)]}
DEPTH, MAX_BATCH, MIN_BATCH, MAX_BYTES, MAX_INFLIGHT = 2, 6, 2, 1000, 2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class ModelBatch:
    mq: MessageQueue
    cap: int
    wait: bool
    ids: list[str] = field(default_factory=list)
    nbytes: int = 0
    state: BatchState = BatchState.OPEN


class BatcherMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.rr = {t: -1 for t in TOPICS}
        self.due_pending: list[SendBatch] = []  # scheduled dues not fired yet
        self.opened: list[SendBatch] = []  # every batch the batcher opened
        self.sent: list[SendBatch] = []  # what the batcher handed to the sender, in order
        self.in_flight: list[SendBatch] = []
        self.releases: list[str] = []  # brokers whose release_held the producer would run soon
        self.seq = 0
        self.real = SendBatcher(
            BatchPolicy(depth=DEPTH, max_batch=MAX_BATCH, min_batch=MIN_BATCH, clock=self.clock),
            max_batch_bytes=MAX_BYTES, max_inflight_per_queue=MAX_INFLIGHT, send_timeout_s=5.0,
            pick_queue=self._pick, send=self._on_send, schedule_due=self.due_pending.append,
            on_seal=lambda b: None, clock=self.clock)
        # the model
        self.policy = BatchPolicy(depth=DEPTH, max_batch=MAX_BATCH, min_batch=MIN_BATCH, clock=self.clock)
        self.of: dict[int, ModelBatch] = {}  # id(real batch) -> its model
        self.m_open: dict[str, ModelBatch] = {}
        self.m_inflight: dict[MessageQueue, int] = {}
        self.m_broker_inflight: dict[str, int] = {}
        self.m_waiting: dict[MessageQueue, deque[ModelBatch]] = {}
        self.m_held: dict[str, list[ModelBatch]] = {}
        self.m_sent: list[ModelBatch] = []
        self.m_next_mq: dict[str, int] = {t: -1 for t in TOPICS}

    # the batcher's hooks (the producer's side) ---------------------------------------------------------
    def _pick(self, topic: str) -> MessageQueue:
        if topic == NO_ROUTE:
            raise NoRouteError(topic, "no writable queue on a master broker")
        self.rr[topic] += 1
        return QUEUES[topic][self.rr[topic] % len(QUEUES[topic])]

    def _on_send(self, batch: SendBatch) -> None:
        self.sent.append(batch)
        self.in_flight.append(batch)

    # the model ------------------------------------------------------------------------------------------
    def _m_seal(self, b: ModelBatch) -> None:
        topic = b.mq.topic
        if self.m_open.get(topic) is b:
            del self.m_open[topic]
        if b.state not in (BatchState.OPEN, BatchState.HELD):
            return
        self.policy.sealed(len(b.ids))
        if self.m_inflight.get(b.mq, 0) < MAX_INFLIGHT:
            self._m_dispatch(b)
        else:
            b.state = BatchState.WAITING
            self.m_waiting.setdefault(b.mq, deque()).append(b)

    def _m_dispatch(self, b: ModelBatch) -> None:
        self.m_inflight[b.mq] = self.m_inflight.get(b.mq, 0) + 1
        broker = (b.mq.broker_name, b.mq.topic)  # the lane
        self.m_broker_inflight[broker] = self.m_broker_inflight.get(broker, 0) + 1
        self.policy.sent(broker)
        b.state = BatchState.IN_FLIGHT
        self.m_sent.append(b)

    def _m_add(self, topic: str, msg_id: str, size: int, wait: bool, solo: bool) -> None:
        b = self.m_open.get(topic)
        if b is not None and (solo or b.wait != wait):
            self._m_seal(b)
            b = None
        if b is None:
            if topic == NO_ROUTE:
                raise NoRouteError(topic, "model")
            self.m_next_mq[topic] += 1
            queues = QUEUES[topic]
            b = ModelBatch(queues[self.m_next_mq[topic] % len(queues)], self.policy.cap(), wait)
            self.m_open[topic] = b
        b.ids.append(msg_id)
        b.nbytes += size
        if solo or len(b.ids) >= b.cap or b.nbytes >= MAX_BYTES:
            self._m_seal(b)

    # rules ----------------------------------------------------------------------------------------------
    @rule(topic=st.sampled_from([*TOPICS, NO_ROUTE]), size=st.integers(0, 400), wait=st.booleans(),
          solo=st.sampled_from([False] * 5 + [True]))
    def add(self, topic, size, wait, solo):
        self._add_one(topic, size, wait, solo)

    @rule(topic=st.sampled_from(TOPICS), n=st.integers(1, 8), size=st.sampled_from([10, 300]), wait=st.booleans())
    def add_burst(self, topic, n, size, wait):
        for _ in range(n):
            self._add_one(topic, size, wait, False)

    def _add_one(self, topic, size, wait, solo):
        self.seq += 1
        msg_id = f"m{self.seq}"
        known = {id(b) for b in self.due_pending}
        model_error = real_error = None
        try:
            self._m_add(topic, msg_id, size, wait, solo)
        except NoRouteError as exc:
            model_error = exc
        try:
            self.real.add(topic, (0, b"x" * size, b""), msg_id, object(), wait=wait, solo=solo)
        except NoRouteError as exc:
            real_error = exc
        assert (model_error is None) == (real_error is None)
        for batch in self.due_pending:  # a batch opened by this add: pair it with the model's
            if id(batch) not in known:
                model = next(m for m in [*self.m_open.values(), *self.m_sent, *self._m_all_waiting()]
                             if m.ids and m.ids[-1] == msg_id)
                self.of[id(batch)] = model
                self.opened.append(batch)
                assert (batch.mq, batch.cap, batch.wait) == (model.mq, model.cap, model.wait)

    @rule(pick=st.integers(0, 1 << 16))
    def fire_due(self, pick):
        if not self.due_pending:
            return
        batch = self.due_pending.pop(pick % len(self.due_pending))
        b = self.of[id(batch)]
        expected = False
        if b.state is BatchState.OPEN:
            broker = (b.mq.broker_name, b.mq.topic)  # the lane
            if len(b.ids) < b.cap and self.m_broker_inflight.get(broker, 0) >= DEPTH:
                b.state = BatchState.HELD
                self.m_held.setdefault(broker, []).append(b)
                expected = True
            else:
                self._m_seal(b)
        assert self.real.due(batch) is expected

    @rule(pick=st.integers(0, 1 << 16))
    def answer(self, pick):
        if not self.in_flight:
            return
        batch = self.in_flight.pop(pick % len(self.in_flight))
        b = self.of[id(batch)]
        broker = (b.mq.broker_name, b.mq.topic)  # the lane
        self.m_inflight[b.mq] -= 1
        self.m_broker_inflight[broker] -= 1
        self.policy.answered(broker)
        self.policy.finished(len(b.ids))
        b.state = BatchState.DONE
        waiting = self.m_waiting.get(b.mq)
        if waiting and self.m_inflight[b.mq] < MAX_INFLIGHT:
            self._m_dispatch(waiting.popleft())
        expected = broker in self.m_held
        assert self.real.finished(batch) is expected
        if expected:
            self.releases.append(broker)

    @rule()
    def release(self):
        if not self.releases:
            return
        broker = self.releases.pop(0)
        for b in self.m_held.pop(broker, []):
            self._m_seal(b)
        self.real.release_held(broker)

    @rule(dt=st.sampled_from([0.1, 0.7, 2.5]))
    def tick(self, dt):
        self.clock.now += dt

    @rule()
    def stop(self):
        for b in list(self.m_open.values()):
            self._m_seal(b)
        self.real.seal_all()
        self.m_held.clear()
        expected: dict[MessageQueue, list[list[str]]] = {}
        for mq, waiting in self.m_waiting.items():
            while waiting:
                b = waiting.popleft()
                b.state = BatchState.DONE
                expected.setdefault(mq, []).append(b.ids)
        abandoned: dict[MessageQueue, list[list[str]]] = {}
        for batch in self.real.abandon():  # each queue's in seal order (the queues' order does not matter)
            abandoned.setdefault(batch.mq, []).append(batch.ids)
        assert abandoned == expected

    def _m_all_waiting(self) -> list[ModelBatch]:
        return [b for q in self.m_waiting.values() for b in q]

    # the comparison -------------------------------------------------------------------------------------
    @invariant()
    def the_batcher_matches_the_model(self):
        assert [b.ids for b in self.sent] == [b.ids for b in self.m_sent]
        for topic in [*TOPICS, NO_ROUTE]:
            real, model = self.real.open_batch(topic), self.m_open.get(topic)
            assert (real.ids if real else None) == (model.ids if model else None)
        for batch in self.opened:
            assert batch.state is self.of[id(batch)].state
        for topic in TOPICS:
            for mq in QUEUES[topic]:
                assert self.real.in_flight(mq) == self.m_inflight.get(mq, 0) <= MAX_INFLIGHT

    @invariant()
    def every_batch_keeps_the_rules(self):
        for batch in self.sent:
            assert 1 <= len(batch.ids) <= batch.cap
            assert batch.nbytes - len(batch.entries[-1][1]) < MAX_BYTES  # only the last send may cross the bytes


TestSendBatcher = BatcherMachine.TestCase
TestSendBatcher.settings = settings(max_examples=200, stateful_step_count=80, deadline=None)


def test_a_solo_send_seals_the_open_batch_and_goes_alone():
    sent: list[SendBatch] = []
    dues: list[SendBatch] = []
    batcher = SendBatcher(BatchPolicy(depth=1, max_batch=8), max_batch_bytes=1 << 20, max_inflight_per_queue=2,
                          send_timeout_s=5.0, pick_queue=lambda t: MessageQueue(t, "b", 0), send=sent.append,
                          schedule_due=dues.append, on_seal=lambda b: None, clock=lambda: 0.0)
    batcher.add("T", (0, b"a", b""), "1", object(), wait=True, solo=False)
    batcher.add("T", (0, b"b", b""), "2", object(), wait=True, solo=False)
    batcher.add("T", (0, b"c", b""), "3", object(), wait=True, solo=True)
    assert [b.ids for b in sent] == [["1", "2"], ["3"]] and batcher.open_batch("T") is None
    assert [b.state for b in dues] == [BatchState.IN_FLIGHT, BatchState.IN_FLIGHT]
    assert batcher.due(dues[0]) is False  # the linger of a batch sealed already changes nothing
    with pytest.raises(KeyError):
        batcher.finished(SendBatch(MessageQueue("T", "b", 9), 0.0, 1, True))  # never sent: no slot
