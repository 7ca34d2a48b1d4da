"""Controller mode's confirm offset: how it is computed from the SyncStateSet's acks, and the read-side gate that keeps
consumers below it (spec rocketmq-replication.md §9.4)."""

from __future__ import annotations

from broker.controller_mode.sync_state_set import SyncStateSetView
from broker.store.consume_queue import UNIT
from broker.store.types import GetStatus
from broker.store.visibility import ConfirmGate, visible_units

from .conftest import draft


def view(members, proposed=None) -> SyncStateSetView:
    return SyncStateSetView(master_id=0, members=frozenset(members), epoch=1, epoch_start=0,
                            proposed=frozenset(proposed) if proposed is not None else None)


def test_confirm_offset_of_the_master_alone_is_its_max_offset():
    assert view({0}).confirm_offset({}, 500) == 500
    assert view({0}).confirm_offset({1: 100}, 500) == 500  # a connected slave outside the set does not count


def test_confirm_offset_is_the_smallest_ack_of_the_members():
    assert view({0, 1, 2}).confirm_offset({1: 300, 2: 200}, 500) == 200
    assert view({0, 1, 2}).confirm_offset({1: 700, 2: 600}, 500) == 500  # never beyond the master's own end


def test_a_member_without_a_connection_holds_the_confirm_offset_back():
    assert view({0, 1, 2}).confirm_offset({1: 300}, 500) == -1


def test_during_a_change_the_union_of_both_sets_counts():
    assert view({0, 1}, proposed={0, 1, 2}).confirm_offset({1: 300, 2: 100}, 500) == 100


def test_the_gate_never_goes_back_and_waits_for_an_unconnected_member():
    acks = {1: 300, 2: 200}
    v = view({0, 1, 2})
    gate = ConfirmGate(100, lambda: 500)
    gate.confirm = lambda: v.confirm_offset(acks, 500)
    assert gate.refresh() == 200
    del acks[2]  # member 2 lost its connection: RocketMQ refuses to advance
    acks[1] = 450
    assert gate.refresh() == 200
    acks[2] = 450
    assert gate.refresh() == 450
    v.members = frozenset({0, 1})  # the set shrank without member 2
    del acks[2]
    acks[1] = 480
    assert gate.refresh() == 480


def test_visible_units_bisects_only_when_the_batch_meets_the_limit():
    units = b"".join(UNIT.pack(off, 10, 0) for off in (0, 10, 20, 30, 40))
    assert visible_units(units, 1000) == 5
    assert visible_units(units, 0) == 0
    assert [visible_units(units, lim) for lim in (1, 10, 11, 25, 40, 41)] == [1, 1, 2, 3, 4, 5]
    assert visible_units(b"", 0) == 0


async def test_consumer_reads_stop_at_the_confirm_offset_and_wake_when_it_advances(store):
    gate = store.enable_confirm_gate(store.max_phy_offset)
    confirm = [store.max_phy_offset]
    gate.confirm = lambda: confirm[0]
    woken: list[tuple[str, int, int]] = []
    store.add_dispatch_listener(lambda t, q, m: woken.append((t, q, m)), confirmed=True)
    ends = []
    for i in range(3):
        res = await store.put_messages("T", 0, [draft(b"m%d" % i)])
        ends.append(res.wrote_offset + res.wrote_bytes)

    hidden = store.get_message("g", "T", 0, 0, 32, confirmed_only=True)
    assert hidden.status is GetStatus.OFFSET_OVERFLOW_ONE and hidden.next_begin_offset == 0
    assert hidden.max_offset == 0 and hidden.message_count == 0
    assert store.max_offset_in_queue("T", 0, confirmed_only=True) == 0
    assert store.max_offset_in_queue("T", 0) == 3
    assert store.get_message("g", "T", 0, 0, 32).message_count == 3  # internal readers see everything
    assert woken == []

    confirm[0] = ends[1]
    gate.refresh()
    assert woken == [("T", 0, 2)]
    two = store.get_message("g", "T", 0, 0, 32, confirmed_only=True)
    assert two.status is GetStatus.FOUND and two.message_count == 2
    assert two.next_begin_offset == 2 and two.max_offset == 2
    assert store.max_offset_in_queue("T", 0, confirmed_only=True) == 2
    assert store.get_message("g", "T", 0, 2, 32, confirmed_only=True).status is GetStatus.OFFSET_OVERFLOW_ONE

    confirm[0] = ends[2]
    gate.refresh()
    assert woken == [("T", 0, 2), ("T", 0, 3)]
    assert store.get_message("g", "T", 0, 2, 32, confirmed_only=True).message_count == 1

    # a set of the master alone confirms its max offset on the put itself
    confirm_max = lambda: store.max_phy_offset  # noqa: E731
    gate.confirm = confirm_max
    await store.put_messages("T", 0, [draft(b"m3")])
    assert woken[-1] == ("T", 0, 4)
    assert store.get_message("g", "T", 0, 3, 32, confirmed_only=True).message_count == 1


async def test_classic_mode_has_no_gate(store):
    assert store.confirm_gate is None
    woken = []
    store.add_dispatch_listener(lambda t, q, m: woken.append(m), confirmed=True)
    await store.put_messages("T", 0, [draft()])
    assert woken == [1]
    assert store.get_message("g", "T", 0, 0, 32, confirmed_only=True).message_count == 1
    assert store.max_offset_in_queue("T", 0, confirmed_only=True) == 1
