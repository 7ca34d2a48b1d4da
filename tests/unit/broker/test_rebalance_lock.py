"""RebalanceLockManager: one holder per (group, queue); renewals, takeover after the 60 s lease, unlock by the
holder only."""

from __future__ import annotations

from broker.rebalance_lock import LOCK_MAX_LIVE_S, MessageQueue, RebalanceLockManager


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


Q0, Q1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)


def test_a_queue_has_one_holder_until_its_lease_runs_out():
    clock = Clock()
    locks = RebalanceLockManager(clock=clock)
    assert locks.try_lock("g", "c1", [Q0, Q1]) == [Q0, Q1]
    assert locks.try_lock("g", "c2", [Q0, Q1]) == []
    assert locks.try_lock("other-group", "c2", [Q0]) == [Q0]  # groups are independent
    clock.now = LOCK_MAX_LIVE_S - 1
    assert locks.try_lock("g", "c1", [Q0]) == [Q0]  # renewed
    clock.now = LOCK_MAX_LIVE_S + 1
    assert locks.holder("g", Q1) is None  # Q1 was not renewed
    assert locks.try_lock("g", "c2", [Q0, Q1]) == [Q1]
    assert locks.holder("g", Q0) == "c1"


def test_only_the_holder_unlocks():
    locks = RebalanceLockManager(clock=Clock())
    locks.try_lock("g", "c1", [Q0])
    assert locks.unlock("g", "c2", [Q0]) == 0 and locks.holder("g", Q0) == "c1"
    assert locks.unlock("g", "c1", [Q0, Q1]) == 1 and locks.holder("g", Q0) is None
    assert locks.try_lock("g", "c2", [Q0]) == [Q0]
