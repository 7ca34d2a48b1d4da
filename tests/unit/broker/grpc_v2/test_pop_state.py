"""The pure pop pieces: receipt handles, checkpoint/ack records, and PopState against a set-of-offsets model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.grpc_v2.pop.receipt import TOPIC_RETRY, Receipt, parse
from broker.grpc_v2.pop.state import Ack, Checkpoint, PopState


def test_a_receipt_round_trips_and_names_the_retry_topic():
    r = Receipt(5, 1_000, 10_000, TOPIC_RETRY, "broker-a", 0, 7, 1234)
    assert parse(r.encode()) == r and r.expires_at_ms == 11_000
    assert r.real_topic("g", "t") == "%RETRY%g_t"


@pytest.mark.parametrize("bad", ["", "1 2 3", "a 2 3 0 0 b 0 0 0", "1 2 3 0 7 b 0 0 0", "1 -2 3 0 0 b 0 0 0"])
def test_forged_handles_do_not_parse(bad):
    with pytest.raises(ValueError):
        parse(bad)


def test_records_round_trip():
    ck = Checkpoint("t", "g", 1, 10, 99, 5000, [0, 2, 3], "b")
    back = Checkpoint.from_json(ck.to_json())
    assert (back.key, back.offsets, back.invisible_ms, back.broker_name) == (ck.key, [10, 12, 13], 5000, "b")
    ack = Ack("t", "g", 1, 10, 99, 12, "b")
    assert Ack.from_json(ack.to_json()) == ack


ops = st.lists(st.one_of(
    st.tuples(st.just("ck"), st.integers(0, 3), st.lists(st.integers(0, 4), min_size=1, max_size=4, unique=True),
              st.integers(0, 50)),
    st.tuples(st.just("ack"), st.integers(0, 3), st.integers(0, 10)),
    st.tuples(st.just("due"), st.integers(0, 80)),
), max_size=40)


@given(ops)
def test_pop_state_agrees_with_a_model_of_in_flight_offsets(script):
    state, model, times = PopState(), {}, {}  # model: ck id -> un-acked offsets
    for n, op in enumerate(script):
        if op[0] == "ck":
            _, so, diffs, it = op
            ck = Checkpoint("t", "g", 0, so * 100, n, it, sorted(diffs), "b", revive_offset=n)
            state.add_checkpoint(ck)
            model[ck.key] = {ck.start_offset + d for d in diffs}
            times[ck.key] = n + it
        elif op[0] == "ack":
            _, so, pick = op
            keys = [k for k in model if k[3] == so * 100]
            if not keys:
                assert not state.add_ack(Ack("t", "g", 0, so * 100, -1, so * 100, "b"))
                continue
            key = keys[pick % len(keys)]
            offset = so * 100 + pick % 5
            expected = offset in model[key]
            assert state.add_ack(Ack("t", "g", 0, key[3], key[4], offset, "b")) == expected
            model[key].discard(offset)
            if not model[key]:
                del model[key], times[key]
        else:
            due = state.due(op[1])
            assert {ck.key for ck in due} == {k for k, t in times.items() if t <= op[1]}
            assert [ck.revive_offset for ck in due] == sorted(ck.revive_offset for ck in due)
        for key, offsets in model.items():
            assert set(state.get(key).unacked()) == offsets
        assert state.in_flight_count() == sum(map(len, model.values()))
        assert sum(state.in_flight_by_topic().values()) == state.in_flight_count()
        queues = state.in_flight_queues("g")
        assert sum(n for _, n in queues.values()) == state.in_flight_count()
        everything = set().union(*model.values()) if model else set()
        assert {low for low, _ in queues.values()} == ({min(everything)} if everything else set())


def test_in_flight_views_split_by_topic_group_and_queue():
    state = PopState()
    state.add_checkpoint(Checkpoint("t", "g", 0, 10, 1, 9, [0, 1, 2], "b"))
    state.add_checkpoint(Checkpoint("t", "g", 1, 4, 1, 5, [0, 3], "b"))
    state.add_checkpoint(Checkpoint("%RETRY%g_t", "g", 0, 0, 2, 3, [0], "b"))
    state.add_checkpoint(Checkpoint("t", "h", 0, 10, 3, 9, [0], "b"))
    state.add_ack(Ack("t", "g", 0, 10, 1, 10, "b"))
    assert state.in_flight_by_topic() == {("t", "g"): 4, ("%RETRY%g_t", "g"): 1, ("t", "h"): 1}
    assert state.in_flight_queues("g") == {("t", 0): (11, 2), ("t", 1): (4, 2), ("%RETRY%g_t", 0): (0, 1)}
    assert state.oldest_revive_time_ms() == 5
