"""Queue choice for the producer's batches (client.queue_choice): round-robin, health, sticky stints."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from client.message import MessageQueue
from client.queue_choice import QueueChoice

QUEUES = [MessageQueue("T", b, q) for b in ("a", "b") for q in range(2)]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sticky(sticky_bytes: int, sticky_s: float = 60.0) -> QueueChoice:
    """A choice whose time bound never ends a stint unless a test moves its clock."""
    return QueueChoice(sticky_bytes, sticky_s, clock=Clock())


def all_healthy(_: str) -> bool:
    return True


def idle(_: MessageQueue) -> int:
    return 0


def test_rotation_visits_every_queue_in_turn():
    choice = QueueChoice()
    assert [choice.rotate(QUEUES, all_healthy) for _ in range(6)] == QUEUES + QUEUES[:2]


def test_rotation_skips_unhealthy_and_avoided_brokers_and_falls_back_when_none_is_left():
    choice = QueueChoice()
    picked = [choice.rotate(QUEUES, lambda b: b != "a") for _ in range(4)]
    assert {mq.broker_name for mq in picked} == {"b"}
    picked = [choice.rotate(QUEUES, all_healthy, avoid_broker="b") for _ in range(4)]
    assert {mq.broker_name for mq in picked} == {"a"}
    assert choice.rotate(QUEUES, lambda b: False) in QUEUES  # nobody healthy: the next queue anyway
    assert choice.rotate([], all_healthy) is None


def test_a_sender_that_waits_for_each_result_rotates_after_every_batch():
    """Nothing is in flight at the next choice, so it spreads exactly like RocketMQ's round-robin."""
    choice = sticky(1 << 20)
    picked = []
    for _ in range(8):
        mq = choice.pick(QUEUES, all_healthy, idle, 2)
        choice.account(mq, 100)
        picked.append(mq)
    assert picked == QUEUES + QUEUES


def test_a_stream_stays_on_a_queue_until_its_stint_is_used_then_moves_on():
    choice = sticky(3000)
    in_flight = Counter()
    picked = []
    for _ in range(8):
        mq = choice.pick(QUEUES, all_healthy, in_flight.__getitem__, 2)
        choice.account(mq, 1000)
        in_flight.clear()
        in_flight[mq] = 1  # the previous batch is still on its way when the next one opens
        picked.append(mq)
    assert picked == [QUEUES[0]] * 3 + [QUEUES[1]] * 3 + [QUEUES[2]] * 2


def test_a_stint_ends_when_its_queue_is_at_the_in_flight_limit_or_its_broker_failed():
    choice = sticky(1 << 20)
    first = choice.pick(QUEUES, all_healthy, idle, 2)
    assert choice.pick(QUEUES, all_healthy, lambda mq: 2, 2) != first  # the queue is full: do not queue behind it
    second = choice.current
    assert choice.pick(QUEUES, lambda b: b != second.broker_name, lambda mq: 1, 2).broker_name != second.broker_name


def test_a_stint_ends_after_its_time_even_below_its_bytes():
    clock = Clock()
    choice = QueueChoice(1 << 30, 0.02, clock=clock)
    first = choice.pick(QUEUES, all_healthy, idle, 2)
    clock.now += 0.019
    assert choice.pick(QUEUES, all_healthy, lambda mq: 1, 2) == first
    clock.now += 0.002
    assert choice.pick(QUEUES, all_healthy, lambda mq: 1, 2) != first


def test_reset_forgets_the_stint():
    choice = sticky(1 << 20)
    first = choice.pick(QUEUES, all_healthy, idle, 2)
    choice.reset()
    assert choice.pick(QUEUES, all_healthy, lambda mq: 1, 2) != first


@given(st.integers(0, 5000), st.integers(1, 1500), st.integers(50, 400))
def test_over_a_stream_of_equal_batches_every_queue_gets_the_same_bytes_within_one_stint(sticky_bytes, size, count):
    choice = sticky(sticky_bytes)
    received = Counter({mq: 0 for mq in QUEUES})
    in_flight: Counter = Counter()
    for _ in range(count):
        mq = choice.pick(QUEUES, all_healthy, in_flight.__getitem__, 2)
        choice.account(mq, size)
        received[mq] += size
        in_flight.clear()
        in_flight[mq] = 1
    stint = max(size, -(-sticky_bytes // size) * size)  # whole batches until the stint reaches sticky_bytes
    assert max(received.values()) - min(received.values()) <= stint
