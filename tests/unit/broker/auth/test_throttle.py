"""FailureThrottle: an address's failed authentications draw on a bucket; past it the address waits; memory is
bounded whatever the number of addresses."""

from __future__ import annotations

from broker.auth.throttle import FailureThrottle


def test_an_address_is_blocked_after_its_burst_and_let_in_again_as_tokens_come_back():
    throttle = FailureThrottle(burst=3, per_s=2.0)
    assert not throttle.blocked("10.0.0.1", 0.0)
    assert [throttle.failed("10.0.0.1", 0.0) for _ in range(3)] == [False, False, True]
    assert throttle.blocked("10.0.0.1", 0.0) == 0.5  # one token back after 1 / per_s
    assert not throttle.blocked("10.0.0.2", 0.0), "another address keeps its own budget"
    assert throttle.blocked("10.0.0.1", 0.25) == 0.25
    assert not throttle.blocked("10.0.0.1", 0.5)
    assert throttle.blocked_total == 2


def test_successes_cost_nothing_and_failures_keep_an_address_blocked_while_they_go_on():
    throttle = FailureThrottle(burst=2, per_s=1.0)
    for t in range(100):  # one failure a second is what per_s allows: never blocked for long
        throttle.failed("a", float(t))
        assert throttle.blocked("a", t + 1.0) == 0.0
    flood = FailureThrottle(burst=2, per_s=1.0)
    for i in range(1000):  # 1,000 a second: blocked all along
        flood.failed("a", i / 1000)
    assert flood.blocked("a", 1.0) > 0


def test_memory_is_bounded_by_max_addresses_and_the_longest_quiet_one_is_dropped():
    throttle = FailureThrottle(burst=1, per_s=0.001, max_addresses=100)
    for i in range(10_000):
        throttle.failed(f"10.0.{i // 256}.{i % 256}", float(i))
    assert len(throttle) == 100
    assert throttle.blocked("10.0.39.15", 10_000.0), "the latest failing address is still held"
    assert not throttle.blocked("10.0.0.0", 10_000.0), "the first one was dropped: it starts again"
