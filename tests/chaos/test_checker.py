"""The chaos checker on hand-made histories: each case is a small story whose verdict is known."""

from __future__ import annotations

from harness.checker import Breakout, Mode, Outcome, Read, Send, SendOk, check, send_ok_overlaps

A, W, F, U = Outcome.ACKED, Outcome.WEAK, Outcome.FAILED, Outcome.UNKNOWN


def sends(*specs: tuple[str, Outcome, int | None]) -> list[Send]:
    """``("w1-3", ACKED, 300)``: id = writer-seq, outcome, commitlog offset."""
    out = []
    for ident, outcome, offset in specs:
        writer, seq = ident.rsplit("-", 1)
        out.append(Send(ident, writer, int(seq), outcome, offset))
    return out


def reads(*ids: str, queue: str = "T:0", node: str = "group") -> list[Read]:
    return [Read(i, queue, n, node) for n, i in enumerate(ids)]


def test_a_clean_history_is_valid_in_both_modes():
    h = sends(("a-1", A, 0), ("a-2", A, 100), ("a-3", W, 200), ("a-4", U, None), ("a-5", F, None))
    rep = check(h, reads("a-1", "a-2", "a-3"), slave_reads=reads("a-1", "a-2", "a-3", node="slave"), slave_ack=300)
    assert rep.problems(Mode.SYNC) == [] and rep.problems(Mode.ASYNC) == []
    assert (rep.attempted, rep.acked, rep.weak, rep.failed, rep.unknown) == (5, 2, 1, 1, 1)
    assert (rep.read, rep.recovered, rep.weak_lost, rep.duplicated) == (3, 1, 0, 0)


def test_an_acked_message_never_read_is_lost_and_broken_out_by_writer_position():
    h = sends(*[(f"a-{i}", A, i * 100) for i in range(1, 8)], ("b-1", A, 900))
    # writer a: 1 lost before its first read (prefix), 4 between reads (middle), 7 after its last (postfix);
    # writer b: nothing of it was read (postfix)
    rep = check(h, reads("a-2", "a-3", "a-5", "a-6"))
    assert rep.lost == ["a-1", "a-4", "a-7", "b-1"]
    assert rep.lost_breakout == Breakout(prefix=1, middle=1, postfix=2)
    assert rep.problems(Mode.ASYNC) and rep.problems(Mode.SYNC)


def test_weak_and_unknown_sends_may_be_missing_or_recovered_without_failing_the_run():
    h = sends(("a-1", W, 0), ("a-2", W, 100), ("a-3", U, None), ("a-4", U, None))
    rep = check(h, reads("a-1", "a-3"))
    assert rep.problems(Mode.SYNC) == []
    assert (rep.weak_lost, rep.recovered, rep.lost) == (1, 2, [])


def test_reads_of_unknown_ids_and_of_refused_sends_are_unexpected_and_aborted():
    h = sends(("a-1", A, 0), ("a-2", F, None))
    rep = check(h, reads("a-1", "a-2", "zz-9"))
    assert rep.unexpected == ["zz-9"] and rep.aborted_reads == ["a-2"]
    assert len(rep.problems(Mode.ASYNC)) == 2


def test_duplicates_are_counted_not_failed():
    h = sends(("a-1", A, 0), ("a-2", A, 100))
    rep = check(h, [Read("a-1", "T:0", 0), Read("a-1", "T:0", 0), Read("a-2", "T:0", 1), Read("a-1", "T:0", 0)])
    assert (rep.duplicated, rep.duplicate_reads, rep.reads, rep.read) == (1, 2, 4, 2)
    assert rep.problems(Mode.SYNC) == []


def test_one_queue_offset_holding_two_ids_is_inconsistent_across_nodes():
    h = sends(("a-1", A, 0), ("a-2", A, 100))
    group = [Read("a-1", "T:1", 7), Read("a-2", "T:1", 8)]
    slave = [Read("a-2", "T:1", 7, "slave"), Read("a-1", "T:1", 6, "slave")]
    rep = check(h, group, slave_reads=slave, slave_ack=1000)
    assert rep.inconsistent_offsets == ["T:1@7: ['a-1', 'a-2']"]
    assert rep.problems(Mode.ASYNC)


def test_sync_demands_every_send_ok_on_the_slave_wherever_it_lies():
    h = sends(("a-1", A, 0), ("a-2", A, 100), ("a-3", A, 200))
    rep = check(h, reads("a-1", "a-2", "a-3"), slave_reads=reads("a-1", "a-2", node="slave"), slave_ack=150)
    assert rep.lost_on_slave == ["a-3"]
    assert rep.problems(Mode.SYNC) and not rep.problems(Mode.ASYNC)  # a-3 starts at 200, beyond the ack


def test_async_allows_only_the_suffix_beyond_the_slave_ack_to_be_missing():
    h = sends(("a-1", A, 0), ("a-2", A, 100), ("a-3", A, 200), ("a-4", A, 300), ("a-5", A, 400))
    all_read = reads("a-1", "a-2", "a-3", "a-4", "a-5")
    # the slave acked 300: a-1..a-3 end at or before 300 (the next record starts there), so they must be there
    hole = check(h, all_read, slave_reads=reads("a-1", "a-3", node="slave"), slave_ack=300)
    assert hole.lost_on_slave == ["a-2", "a-4", "a-5"] and hole.lost_on_slave_below_ack == ["a-2"]
    assert hole.problems(Mode.ASYNC)
    suffix = check(h, all_read, slave_reads=reads("a-1", "a-2", "a-3", node="slave"), slave_ack=300)
    assert suffix.lost_on_slave_below_ack == [] and suffix.problems(Mode.ASYNC) == []
    # a-4 starts at 300 and may end past 310: a partly replicated record is allowed to be missing
    partly = check(h, all_read, slave_reads=reads("a-1", "a-2", "a-3", node="slave"), slave_ack=310)
    assert partly.problems(Mode.ASYNC) == []


def test_the_record_end_bound_uses_weak_sends_and_never_guesses_past_the_last_known_start():
    h = sends(("a-1", A, 0), ("a-2", W, 100), ("a-3", A, 200))
    rep = check(h, reads("a-1", "a-2", "a-3"), slave_reads=reads(node="slave"), slave_ack=10_000)
    # a-1 ends at or before 100 (a weak send starts there); a-3 is the last known start: its end is unknown
    assert rep.lost_on_slave_below_ack == ["a-1"]


def test_without_a_recorded_ack_nothing_counts_as_below_it():
    h = sends(("a-1", A, 0), ("a-2", A, 100))
    rep = check(h, reads("a-1", "a-2"), slave_reads=[], slave_ack=None)
    assert rep.lost_on_slave == ["a-1", "a-2"] and rep.lost_on_slave_below_ack == []
    assert rep.problems(Mode.SYNC) and not rep.problems(Mode.ASYNC)


def test_a_send_recorded_twice_counts_once_with_its_last_outcome():
    h = [Send("a-1", "a", 1, U), Send("a-1", "a", 1, A, 0)]
    rep = check(h, reads("a-1"))
    assert (rep.attempted, rep.acked, rep.unknown) == (1, 1, 0)


def test_after_a_destroyed_async_master_unread_messages_may_be_lost_only_beyond_the_slave_ack():
    h = sends(*[(f"a-{i}", A, (i - 1) * 100) for i in range(1, 6)])  # a-1 at 0 ... a-5 at 400
    # the group read a-1, a-2 from the master before it was destroyed; the slave acked 300 and holds a-1..a-3
    suffix = check(h, reads("a-1", "a-2"), slave_reads=reads("a-1", "a-2", "a-3", node="slave"), slave_ack=300)
    assert suffix.lost == ["a-4", "a-5"] and suffix.lost_below_ack == []
    assert suffix.problems(Mode.ASYNC) == []
    assert suffix.problems(Mode.SYNC)  # SYNC: a SEND_OK is on the slave, whatever happens to the master
    hole = check(h, reads("a-1", "a-2"), slave_reads=reads("a-1", "a-2", node="slave"), slave_ack=300)
    assert hole.lost_below_ack == ["a-3"] and hole.problems(Mode.ASYNC)


def test_a_message_read_from_the_master_then_missing_on_the_slave_is_not_lost():
    h = sends(("a-1", A, 0), ("a-2", A, 100))
    rep = check(h, reads("a-1", "a-2"), slave_reads=reads("a-1", node="slave"), slave_ack=100)
    assert rep.lost == [] and rep.lost_on_slave == ["a-2"] and rep.lost_on_slave_below_ack == []
    assert rep.problems(Mode.ASYNC) == [] and rep.problems(Mode.SYNC)


def ok(broker: str, sent: float, answered: float, group: str = "g", term: int | None = None) -> SendOk:
    return SendOk(group, broker, sent, answered, f"{broker}@{sent}", term)


def test_a_clean_handover_has_no_overlapping_send_ok_periods_even_with_sends_in_flight_across_it():
    history = [ok("A", 0.0, 0.1), ok("A", 1.0, 1.1), ok("A", 1.9, 3.0),  # in flight across the switch
               ok("B", 2.0, 2.9), ok("B", 4.0, 4.1), ok("C", 1.5, 1.6, group="other")]
    assert send_ok_overlaps(history) == []
    rep = check([], [], send_oks=history)
    assert rep.problems(Mode.SYNC) == [] and rep.figures()["send_oks"] == 6


def test_a_send_ok_answered_inside_another_brokers_period_is_split_brain():
    history = [ok("A", 0.0, 0.1), ok("B", 2.0, 2.1), ok("A", 3.0, 3.1), ok("B", 4.0, 4.1)]
    found = send_ok_overlaps(history)
    assert len(found) == 2 and "B@2.0 from B" in found[0] and "A@3.0 from A" in found[1]
    rep = check([], [], send_oks=history)
    assert rep.figures()["overlapping_send_ok"] == 2
    assert any("split brain" in p for p in rep.problems(Mode.SYNC))
    # a failback is a new term of the same broker, not an overlap
    assert send_ok_overlaps([ok("A", 0.0, 0.1, term=1), ok("B", 2.0, 2.1, term=2), ok("A", 3.0, 3.1, term=3)]) == []
    # another group's broker answering meanwhile is no overlap either
    assert send_ok_overlaps([ok("A", 0.0, 0.1), ok("B", 2.0, 2.1, group="h"), ok("A", 3.0, 3.1)]) == []


def at(broker: str, sent: float, answered: float, offset: int) -> SendOk:
    return SendOk("g", broker, sent, answered, f"{broker}@{offset}", None, offset)


def test_with_offsets_a_failback_is_a_new_term_and_two_logs_written_at_once_are_found():
    # A's first term (offsets 0, 100), B's (200, 300), A's again (400): one log, no overlap
    failback = [at("A", 0.0, 0.1, 0), at("A", 1.0, 1.1, 100), at("B", 2.0, 2.1, 200), at("B", 3.0, 3.1, 300),
                at("A", 4.0, 4.1, 400)]
    assert send_ok_overlaps(failback) == []
    # B was elected while A went on: both append after offset 100, so B's 200 is answered before A's 150 is sent
    split = [at("A", 0.0, 0.1, 0), at("A", 1.0, 1.1, 100), at("B", 2.0, 2.1, 200), at("A", 2.5, 2.6, 150),
             at("B", 3.0, 3.1, 250)]
    found = send_ok_overlaps(split)
    assert any("two logs written at once" in f and "A@150" in f for f in found), found
    # the same offset acknowledged twice
    assert any("2 SEND_OKs at offset 7" in f for f in send_ok_overlaps([at("A", 0, 0.1, 7), at("B", 1, 1.1, 7)]))
