"""The producer's batch policy (client.batch_policy): caps from measured concurrency, and holding partial batches."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.batch_policy import BatchPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def policy(**kw) -> tuple[BatchPolicy, Clock]:
    clock = Clock()
    kw.setdefault("window_s", 1.0)
    return BatchPolicy(clock=clock, **kw), clock


def test_without_a_sample_the_first_burst_may_fill_a_whole_batch():
    p, _ = policy(depth=2, max_batch=512)
    assert p.cap() == 512


def test_the_cap_spreads_the_measured_concurrency_over_depth_batches():
    p, _ = policy(depth=2, max_batch=512, min_batch=16)
    p.sealed(64)  # 64 senders went out in one batch
    assert p.cap() == 32
    p.finished(64)
    p.sealed(32)
    p.sealed(32)  # two groups of 32 outstanding: the same concurrency
    assert p.cap() == 32
    p3, _ = policy(depth=3, max_batch=512, min_batch=1)
    p3.sealed(64)
    assert p3.cap() == 22  # rounded up: three batches hold them all


def test_the_cap_stays_between_min_batch_and_max_batch():
    p, _ = policy(depth=2, max_batch=100, min_batch=16)
    p.sealed(10)
    assert p.cap() == 16  # ten senders are not worth splitting
    p.sealed(1000)
    assert p.cap() == 100
    small, _ = policy(depth=2, max_batch=8, min_batch=16)
    small.sealed(4)
    assert small.cap() == 8  # min_batch never lifts the cap over max_batch


def test_concurrency_is_the_peak_of_the_current_and_the_previous_window():
    p, clock = policy(depth=2, max_batch=512, min_batch=1, window_s=1.0)
    p.sealed(64)
    p.finished(64)
    clock.now += 1.0  # a new window: the old peak still counts
    p.sealed(8)
    assert p.cap() == 32
    p.finished(8)
    clock.now += 1.0  # two windows on: only the last window's 8
    p.sealed(8)
    assert p.cap() == 4
    p.finished(8)
    clock.now += 5.0  # a long gap: nothing is remembered, the next burst goes whole
    assert p.cap() == 512


def test_a_partial_batch_waits_only_when_its_broker_has_depth_requests_in_flight():
    p, _ = policy(depth=2)
    assert not p.hold("b", 10, 32)
    p.sent("b")
    assert not p.hold("b", 10, 32)  # one request in flight: the batch overlaps it
    p.sent("b")
    assert p.hold("b", 10, 32)
    assert not p.hold("b", 32, 32)  # a full batch never waits here
    assert not p.hold("other", 10, 32)  # in flight is counted per lane (topic on a broker)
    p.answered("b")
    assert not p.hold("b", 10, 32)
    assert p.in_flight("b") == 1
    p.answered("b")
    p.answered("b")  # an extra answer (a failed request's cleanup) never goes negative
    assert p.in_flight("b") == 0


def test_depth_one_keeps_the_old_behaviour():
    p, _ = policy(depth=1, max_batch=512)
    p.sealed(64)
    assert p.cap() == 512
    for _ in range(5):
        p.sent("b")
    assert not p.hold("b", 1, 512)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="positive"):
        BatchPolicy(depth=0)
    with pytest.raises(ValueError, match="positive"):
        BatchPolicy(window_s=0)


@given(
    st.integers(1, 8),
    st.integers(1, 1024),
    st.integers(1, 256),
    st.lists(st.tuples(st.sampled_from(["seal", "finish", "tick"]), st.integers(1, 2000)), max_size=40),
)
def test_the_cap_is_always_a_usable_batch_size(depth, max_batch, min_batch, ops):
    p, clock = policy(depth=depth, max_batch=max_batch, min_batch=min_batch)
    for op, n in ops:
        if op == "seal":
            p.sealed(n)
        elif op == "finish":
            p.finished(n)
        else:
            clock.now += n / 1000
        cap = p.cap()
        assert 1 <= min(min_batch, max_batch) <= cap <= max_batch or (depth == 1 and cap == max_batch)
        assert p.outstanding >= 0
