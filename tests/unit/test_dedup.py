"""The broker's send dedup window: decisions, bounds, claims, and the rebuild from commitlog records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.config import MessageStoreConfig
from broker.dedup import FirstSend, SendDedupWindow, Verdict, restore_from_records, restore_from_store
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft
from remoting.message_codec import check_record, encode_properties, host_bytes, offset_msg_id
from tests.stored_records import stored_record


class Clock:
    def __init__(self, ms: int = 1_000_000) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def first(offset: int, at_ms: int, queue_id: int = 0) -> FirstSend:
    return FirstSend(0, queue_id, offset, 1000 + offset, f"ID{offset}", at_ms)


def store(window: SendDedupWindow, topic: str, keys: list[str], clock: Clock, base: int = 0) -> list[FirstSend]:
    """What the send handler does: plan, append the new ones, complete; returns one result per message."""
    plan = window.plan(topic, keys)
    assert not plan.in_flight
    stored = [first(base + j, clock.ms) for j in range(len(plan.new_indices))]
    window.complete(plan, stored)
    return plan.results(stored)


def test_a_key_sent_twice_within_the_window_is_stored_once_and_answered_with_the_first_result():
    clock = Clock()
    window = SendDedupWindow(600, clock_ms=clock)
    results = store(window, "T", ["k1", "k2"], clock)
    clock.ms += 599_000
    plan = window.plan("T", ["k2", "k3"])
    assert plan.new_indices == [1]
    assert plan.duplicates == {0: results[1]}
    stored = [first(7, clock.ms)]
    window.complete(plan, stored)
    assert plan.results(stored) == [results[1], stored[0]]


def test_the_same_key_on_another_topic_is_a_different_message():
    clock = Clock()
    window = SendDedupWindow(600, clock_ms=clock)
    store(window, "A", ["k"], clock)
    assert window.plan("B", ["k"]).new_indices == [0]


def test_a_key_older_than_the_window_is_stored_again():
    clock = Clock()
    window = SendDedupWindow(10, clock_ms=clock)
    store(window, "T", ["k"], clock)
    clock.ms += 10_001
    assert window.lookup("T", "k") is None
    assert window.plan("T", ["k"]).new_indices == [0]


def test_messages_without_a_uniq_key_are_always_stored():
    clock = Clock()
    window = SendDedupWindow(600, clock_ms=clock)
    store(window, "T", ["", ""], clock)
    assert window.plan("T", ["", ""]).new_indices == [0, 1]
    assert len(window) == 0


def test_a_key_repeated_inside_one_request_is_stored_once_and_both_get_its_result():
    clock = Clock()
    window = SendDedupWindow(600, clock_ms=clock)
    plan = window.plan("T", ["k", "k", "j"])
    assert plan.new_indices == [0, 2] and plan.repeats == {1: 0}
    stored = [first(0, clock.ms), first(1, clock.ms)]
    window.complete(plan, stored)
    assert plan.results(stored) == [stored[0], stored[0], stored[1]]


def test_a_key_still_being_stored_makes_a_racing_request_retry_without_claiming_anything():
    clock = Clock()
    window = SendDedupWindow(600, clock_ms=clock)
    racing_first = window.plan("T", ["k"])
    second = window.plan("T", ["x", "k"])
    assert second.in_flight == [1] and second.claimed == []
    assert window.lookup("T", "x") is None
    window.complete(racing_first, [first(0, clock.ms)])
    assert window.plan("T", ["k"]).duplicates == {0: first(0, clock.ms)}


def test_a_failed_append_releases_its_claims_so_a_retry_stores_the_message():
    clock = Clock()
    window = SendDedupWindow(600, clock_ms=clock)
    plan = window.plan("T", ["k"])
    window.release(plan)
    assert window.plan("T", ["k"]).new_indices == [0]


def test_the_count_bound_drops_the_oldest_entries_and_counts_them_as_evicted_early():
    clock = Clock()
    window = SendDedupWindow(600, max_entries=3, clock_ms=clock)
    for i in range(5):
        store(window, "T", [f"k{i}"], clock, base=i)
        clock.ms += 1
    assert len(window) == 3
    assert window.evicted_early == 2
    assert window.lookup("T", "k0") is None and window.lookup("T", "k4") is not None
    assert window.oldest_age_s() == pytest.approx(0.003)


def test_the_window_rejects_bounds_that_cannot_hold_anything():
    with pytest.raises(ValueError, match="sendDedupWindowSeconds"):
        SendDedupWindow(0)
    with pytest.raises(ValueError, match="at least one entry"):
        SendDedupWindow(10, max_entries=0)


def test_restoring_from_commitlog_records_indexes_the_uniq_keys_of_the_last_window():
    clock = Clock(10_000_000)
    window = SendDedupWindow(60, clock_ms=clock)
    host = ("127.0.0.1", 10911)
    records, phy = [], 0
    for i, (key, age_ms) in enumerate([("old", 61_000), ("a", 30_000), ("", 20_000), ("b", 1_000)]):
        props = encode_properties({"UNIQ_KEY": key} if key else {"TAGS": "t"})
        raw = stored_record(queue_id=2, queue_offset=i, physical_offset=phy, store_timestamp=clock.ms - age_ms,
                            store_host=host_bytes(*host), body=b"x", properties=props)
        records.append((phy, check_record(raw, 0)))
        phy += len(raw)
    assert restore_from_records(window, records, host) == 2
    hit = window.lookup("T", "a")
    assert hit is not None and (hit.queue_id, hit.queue_offset) == (2, 1)
    assert hit.msg_id == offset_msg_id(host, hit.physical_offset)
    assert window.lookup("T", "old") is None


@given(
    ops=st.lists(
        st.tuples(st.integers(0, 3_000), st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=4)),
        max_size=40,
    )
)
def test_the_window_agrees_with_a_naive_model_of_first_sends(ops):
    """Model: a dict of key -> store time, no count bound; a key is a duplicate iff stored <= window ago."""
    clock = Clock()
    window = SendDedupWindow(2, max_entries=10_000, clock_ms=clock)
    model: dict[str, int] = {}
    for advance, keys in ops:
        clock.ms += advance
        plan = window.plan("T", keys)
        seen: set[str] = set()
        for i, key in enumerate(keys):
            if key in seen:
                verdict = Verdict.REPEAT
            elif key in model and clock.ms - model[key] <= 2_000:
                verdict = Verdict.DUPLICATE
            else:
                verdict = Verdict.NEW
            seen.add(key)
            got = Verdict.REPEAT if i in plan.repeats else Verdict.DUPLICATE if i in plan.duplicates else Verdict.NEW
            assert got == verdict, (key, keys)
            if verdict is Verdict.NEW:
                model[key] = clock.ms
        window.complete(plan, [first(0, clock.ms) for _ in plan.new_indices])


async def test_a_restarted_store_rebuilds_the_window_from_its_commitlog_tail(tmp_path):
    config = MessageStoreConfig(
        store_path_root_dir=str(tmp_path),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        warm_mapped_file_enable=False,
    )
    store = MessageStore(config)
    await store.start()
    try:
        for i in range(150):  # ~2.5 commitlog files
            await store.put_messages("T", i % 2, [MessageDraft(b"x" * 1000, {"UNIQ_KEY": f"K{i}"})])
    finally:
        await store.stop()
    store = MessageStore(config)
    await store.start()
    try:
        window = SendDedupWindow(600)
        added, begin = restore_from_store(window, store, ("127.0.0.1", 10911))
        assert added == 150 and begin == 0
        hit = window.lookup("T", "K149")
        assert hit is not None and (hit.queue_id, hit.queue_offset) == (1, 74)
        budgeted = SendDedupWindow(600)
        added, begin = restore_from_store(budgeted, store, ("127.0.0.1", 10911), max_scan_bytes=1)
        assert begin == store._commitlog.files.files[-1].start_offset and 0 < added < 150
    finally:
        await store.stop()
