"""The transaction ledger against a model of the records, with crashes between any two writes.

The model keeps what a store would: the half queue, the op queue, the committed messages and the system group's
stored offsets. The service steps (a producer's END_TRANSACTION, a check that renews or discards a copy and asks
the producer) are written here the way the broker performs them, write by write, each write followed by the
ledger update; a crash may cut any step between its writes, and a restart rebuilds the ledger by replaying both
queues from the stored offsets. Whatever happens: no transaction is committed twice, none rolled back is ever
committed, and a transaction whose producer knows its outcome ends committed or rolled back once the checks run.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.transaction.ledger import HalfCopy, Ledger

CHECK_MAX = 3
TIMEOUT = 10


class Crash(Exception):
    pass


class Records:
    def __init__(self) -> None:
        self.halves: list[tuple[str, int, int]] = []  # (tx, check times, store time)
        self.ops: list[tuple[list[int], list[str], str]] = []
        self.committed: list[str] = []
        self.discarded: list[str] = []
        self.offsets = (0, 0)  # the system group's stored (half, op) offsets


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rec = Records()
        self.ledger = Ledger()
        self.now = 0
        self.decisions: dict[str, str | None] = {}
        self.crash_after: int | None = None  # the next step dies after this many of its writes
        self.txs = 0

    # writes, each possibly the last before a crash -------------------------------------------------------------
    def _write(self) -> None:
        if self.crash_after is not None:
            if self.crash_after == 0:
                self.crash_after = None
                raise Crash
            self.crash_after -= 1

    def put_half(self, tx: str, check_times: int) -> int:
        self._write()
        self.rec.halves.append((tx, check_times, self.now))
        q = len(self.rec.halves) - 1
        self.ledger.on_half(HalfCopy(q, 1000 + q, tx, "pg", self.now + TIMEOUT, check_times))  # a late copy stays closed
        return q

    def put_op(self, offsets: list[int], txs: list[str], resolution: str) -> None:
        self._write()
        self.rec.ops.append((offsets, txs, resolution))
        self.ledger.on_op(len(self.rec.ops) - 1, offsets, txs, resolution)

    def put_real(self, tx: str) -> None:
        self._write()
        self.rec.committed.append(tx)

    # the broker's steps --------------------------------------------------------------------------------------
    def end_transaction(self, q: int, outcome: str) -> None:
        tx = self.rec.halves[q][0]
        action, copies = self.ledger.end(q, tx)
        if action != "resolve":
            return
        if outcome == "commit" and tx not in self.rec.committed:  # the index lookup of topic#tx
            self.put_real(tx)
        self.put_op(copies, [tx], outcome)

    def end_batch(self, ends: list[tuple[int, str]]) -> None:
        """ENDs that arrived together, as the service resolves them: each transaction once (a second END of it is
        refused busy), every committed real message first, then one op per outcome naming all its transactions."""
        chosen: dict[str, dict[str, list[int]]] = {"commit": {}, "rollback": {}}
        for q, outcome in ends:
            tx = self.rec.halves[q][0]
            if tx in chosen["commit"] or tx in chosen["rollback"]:
                continue
            action, copies = self.ledger.end(q, tx)
            if action == "resolve":
                chosen[outcome][tx] = copies
        for tx in chosen["commit"]:
            if tx not in self.rec.committed:  # the index lookup of topic#tx
                self.put_real(tx)
        for outcome, txs in chosen.items():
            if txs:
                self.put_op([q for copies in txs.values() for q in copies], list(txs), outcome)

    def check_pass(self) -> None:
        for copy in self.ledger.due(self.now, 10):
            if not self.ledger.is_open(copy.queue_offset):
                continue  # closed by an earlier step of this pass (its transaction was decided)
            if copy.check_times >= CHECK_MAX:
                self._write()
                self.rec.discarded.append(copy.tx_id)
                self.put_op([copy.queue_offset], [copy.tx_id], "discarded")
                continue
            new_q = self.put_half(copy.tx_id, copy.check_times + 1)
            self.put_op([copy.queue_offset], [copy.tx_id], "renewed")
            answer = self.decisions.get(copy.tx_id)
            if answer is not None:
                self.end_transaction(new_q, answer)

    def run(self, step) -> None:
        try:
            step()
        except Crash:
            self.restart()

    def restart(self) -> None:
        half_offset, op_offset = self.rec.offsets
        self.ledger = Ledger(half_offset=half_offset, op_offset=op_offset)
        for i, (offsets, txs, resolution) in enumerate(self.rec.ops):
            if i >= op_offset:
                self.ledger.on_op(i, offsets, txs, resolution)
        for q, (tx, times, ts) in enumerate(self.rec.halves):
            if q >= half_offset:
                self.ledger.on_half(HalfCopy(q, 1000 + q, tx, "pg", ts + TIMEOUT, times))
        self.ledger.seen_half_end = len(self.rec.halves)

    # rules ---------------------------------------------------------------------------------------------------
    @rule(decision=st.sampled_from(["commit", "rollback", None]))
    def begin(self, decision):
        tx = f"T{self.txs}"
        self.txs += 1
        self.decisions[tx] = decision
        self.run(lambda: self.put_half(tx, 0))

    @precondition(lambda self: self.rec.halves)
    @rule(data=st.data(), outcome=st.sampled_from(["commit", "rollback"]), crash=st.sampled_from([None, 0, 1]))
    def producer_ends(self, data, outcome, crash):
        q = data.draw(st.integers(0, len(self.rec.halves) - 1))
        tx = self.rec.halves[q][0]
        if self.decisions[tx] is None:
            self.decisions[tx] = outcome
        self.crash_after = crash
        self.run(lambda: self.end_transaction(q, self.decisions[tx]))
        self.crash_after = None

    @precondition(lambda self: self.rec.halves)
    @rule(data=st.data(), crash=st.sampled_from([None, 0, 1, 2, 3, 4]))
    def producers_end_together(self, data, crash):
        picks = data.draw(st.lists(st.tuples(st.integers(0, len(self.rec.halves) - 1),
                                             st.sampled_from(["commit", "rollback"])), min_size=2, max_size=5))
        ends = []
        for q, outcome in picks:
            tx = self.rec.halves[q][0]
            if self.decisions[tx] is None:
                self.decisions[tx] = outcome
            ends.append((q, self.decisions[tx]))
        self.crash_after = crash
        self.run(lambda: self.end_batch(ends))
        self.crash_after = None

    @rule(seconds=st.integers(0, 15), crash=st.sampled_from([None, 0, 1, 2, 3]))
    def checks_run(self, seconds, crash):
        self.now += seconds
        self.crash_after = crash
        self.run(self.check_pass)
        self.crash_after = None

    @rule()
    def offsets_stored(self):
        self.rec.offsets = self.ledger.advance()

    @rule()
    def crash(self):
        self.restart()

    # what must always hold -----------------------------------------------------------------------------------
    @invariant()
    def committed_once_and_never_after_a_rollback(self):
        assert len(self.rec.committed) == len(set(self.rec.committed)), self.rec.committed
        for tx in self.rec.committed:
            assert self.decisions[tx] == "commit"

    @invariant()
    def ledger_matches_a_replay(self):
        live = self.ledger
        self.restart()
        replayed_open = {q for q in self.ledger.open}
        self.ledger = live
        assert set(live.open) == replayed_open

    def teardown(self):
        # liveness: with every decision known and time moving on, every transaction is decided exactly once
        for tx in self.decisions:
            if self.decisions[tx] is None:
                self.decisions[tx] = "rollback"
        for _ in range(CHECK_MAX + 3):
            self.now += TIMEOUT + 1
            self.run(self.check_pass)
        for tx, decision in self.decisions.items():
            decided = tx in self.rec.committed or tx in self.rec.discarded or any(
                tx in txs and res in ("rollback", "commit") for _, txs, res in self.rec.ops)
            assert decided, (tx, decision)
            if decision == "commit" and tx not in self.rec.discarded:
                assert tx in self.rec.committed, tx


LedgerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestLedger = LedgerMachine.TestCase


def test_a_renewal_stored_after_its_transaction_was_decided_stays_closed_once_the_offsets_move():
    """Hypothesis' find: a check that crashed between a renewal and its op left two copies; the next pass renewed
    the stale one after the producer's commit had closed it, and advance() let the commit's op leave the replayed
    window while that late copy was still above half_offset, so a restart reopened it."""
    m = LedgerMachine()
    m.begin("commit")
    m.begin(None)
    m.checks_run(seconds=10, crash=1)
    m.checks_run(seconds=10, crash=None)
    m.offsets_stored()
    m.ledger_matches_a_replay()
    m.teardown()


def test_a_renewal_opened_while_the_commit_op_was_being_written_is_closed_for_good():
    """A check renewed T0 (copy 2) after END_TRANSACTION read the ledger but before its op was stored: the op lists
    copy 0 only and closes copy 2 through its transaction; it must stay replayed until half_offset passes copy 2."""
    halves = [("T0", 0), ("T1", 0), ("T0", 1)]
    live = Ledger()
    live.on_half(HalfCopy(0, 1000, "T0", "pg", 10, 0))
    live.on_half(HalfCopy(1, 1001, "T1", "pg", 10, 0))
    action, copies = live.end(0, "T0")
    assert (action, copies) == ("resolve", [0])
    live.on_half(HalfCopy(2, 1002, "T0", "pg", 20, 1))  # the racing renewal
    ops = [(copies, ["T0"], "commit")]
    live.on_op(0, *ops[0])
    half_offset, op_offset = live.advance()
    replay = Ledger(half_offset=half_offset, op_offset=op_offset)
    for i, op in enumerate(ops):
        if i >= op_offset:
            replay.on_op(i, *op)
    for q, (tx, times) in enumerate(halves):
        if q >= half_offset:
            replay.on_half(HalfCopy(q, 1000 + q, tx, "pg", 10, times))
    assert set(live.open) == set(replay.open) == {1}
