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


# FIFO: the order lock and redelivery-first, against a per-offset model -----------------------------------------
fifo_ops = st.lists(st.one_of(
    st.tuples(st.just("pop"), st.integers(1, 4), st.integers(1, 30)),  # batch size, invisible time
    st.tuples(st.just("ack"), st.integers(0, 40)),  # which in-flight message (modulo)
    st.tuples(st.just("change"), st.integers(0, 40), st.integers(0, 30)),
    st.tuples(st.just("wait"), st.integers(1, 40)),
    st.just(("restart",)),
), max_size=50)


class _FifoQueue:
    """Drives PopState as PopService does for one FIFO queue of 10 messages, recording what it writes, so the
    records can be scanned back into a fresh state (a restart)."""

    def __init__(self) -> None:
        self.state, self.records, self.committed, self.now = PopState(), [], 0, 1000

    def pop(self, batch: int, invisible: int) -> list[tuple[int, int]] | None:
        if self.state.fifo_blocked("t", "g", 0, self.now):
            return None
        again = [(o, a + 1) for o, a, _ in self.state.fifo_redeliveries("t", "g", 0)][:batch]
        fresh = [(o, 1) for o in range(self.committed, min(10, self.committed + batch - len(again)))]
        got = again + fresh
        if got:
            so = got[0][0]
            self._ck(Checkpoint("t", "g", 0, so, self.now, invisible, [o - so for o, _ in got], "b", fifo=True,
                                attempts=[a for _, a in got]))
            self.committed = max(self.committed, got[-1][0] + 1)
        self.now += 1
        return got

    def _ck(self, ck: Checkpoint) -> None:
        ck.revive_offset = len(self.records)
        self.records.append(("ck", ck.to_json(), ck.revive_offset))
        self.state.add_checkpoint(ck)

    def _ack(self, ack: Ack) -> None:
        self.records.append(("ack", ack.to_json(), len(self.records)))
        self.state.add_ack(ack)

    def restart(self) -> None:
        self.state = PopState()
        for tag, body, offset in self.records:
            if tag == "ck":
                ck = Checkpoint.from_json(body)
                ck.revive_offset = offset
                self.state.add_checkpoint(ck)
            else:
                self.state.add_ack(Ack.from_json(body))


@given(fifo_ops)
def test_fifo_pop_keeps_one_batch_in_flight_and_redelivers_first_across_restarts(script):
    q = _FifoQueue()
    model: dict[int, tuple[int, int]] = {}  # offset handed out, not acked -> (visible again at, attempt)
    delivered: list[int] = []  # first deliveries, in order
    for op in script:
        if op[0] == "pop":
            blocked = any(until > q.now for until, _ in model.values())
            got = q.pop(op[1], op[2])
            if blocked:
                assert got is None
                continue
            expired = sorted(model)[:op[1]]
            assert [o for o, _ in got][:len(expired)] == expired  # redeliveries first, lowest offset first
            assert [a for o, a in got if o in model] == [model[o][1] + 1 for o in expired]
            new = [o for o, _ in got if o not in model]
            assert all(a == 1 for o, a in got if o in new)
            delivered += new
            for o, a in got:
                model[o] = (q.now - 1 + op[2], a)
        elif op[0] == "ack" and model:
            o = sorted(model)[op[1] % len(model)]
            [(ck, _)] = [(ck, off) for off, _, ck in q.state.fifo_redeliveries("t", "g", 0) if off == o]
            q._ack(Ack("t", "g", 0, ck.start_offset, ck.pop_time_ms, o, "b"))
            del model[o]
        elif op[0] == "change" and model:
            o = sorted(model)[op[1] % len(model)]
            [(ck, attempt)] = [(ck, a) for off, a, ck in q.state.fifo_redeliveries("t", "g", 0) if off == o]
            q._ck(Checkpoint("t", "g", 0, o, q.now, op[2], [0], "b", fifo=True, attempts=[attempt]))
            q._ack(Ack("t", "g", 0, ck.start_offset, ck.pop_time_ms, o, "b"))
            model[o] = (q.now + op[2], attempt)
            q.now += 1
        elif op[0] == "wait":
            q.now += op[1]
        elif op[0] == "restart":
            q.restart()
        assert delivered == sorted(delivered) == list(range(len(delivered)))  # new messages in queue order
        assert {o: a for o, a, _ in q.state.fifo_redeliveries("t", "g", 0)} == {o: a for o, (_, a) in model.items()}
        assert q.state.fifo_blocked("t", "g", 0, q.now) == any(until > q.now for until, _ in model.values())
        assert q.state.in_flight_count() == len(model)


def test_a_fifo_checkpoint_round_trips_with_its_attempts_and_a_renewed_one_keeps_its_acks():
    ck = Checkpoint("t", "g", 0, 5, 10, 1000, [0, 1], "b", fifo=True, attempts=[2, 1])
    back = Checkpoint.from_json(ck.to_json())
    assert back.fifo and back.attempts == [2, 1] and back.attempt(5) == 2 and back.attempt(6) == 1
    assert not Checkpoint.from_json(Checkpoint("t", "g", 0, 5, 10, 1000, [0], "b").to_json()).fifo
    with pytest.raises(ValueError):
        Checkpoint.from_json(ck.to_json().replace(b'"ac":[2,1]', b'"ac":[2]'))
    state = PopState()
    ck.revive_offset = 3
    state.add_checkpoint(ck)
    state.add_ack(Ack("t", "g", 0, 5, 10, 5, "b"))
    renewed = Checkpoint("t", "g", 0, 5, 10, 61_000, [0, 1], "b", fifo=True, attempts=[2, 1], revive_offset=9)
    state.add_checkpoint(renewed)
    held = state.get(ck.key)
    assert (held.unacked(), held.revive_time_ms, state.min_revive_offset()) == ([6], 61_010, 3)
    held.renew_client = "c1"
    assert state.renewable(61_000, 10_000) == [held] and state.renewable(40_000, 10_000) == []
