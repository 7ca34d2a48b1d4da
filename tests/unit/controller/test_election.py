"""The election rule and SyncStateSet changes against a simple model (Hypothesis), stale epochs included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.election import alter_sync_state_set, apply_broker_id, elect, register_broker
from controller.state import GroupState, LiveInfo, Member, StateError
from remoting.codes import ResponseCode as RC

IDS = st.integers(1, 5)


def group(n: int = 3, master: int | None = 1, sss=(1, 2), master_epoch: int = 1, sss_epoch: int = 1) -> GroupState:
    members = {i: Member(f"10.0.0.{i}:10911", f"10.0.0.{i}:10911;0") for i in range(1, n + 1)}
    return GroupState("c", "broker-a", members, master, members[master].address if master else "", master_epoch,
                      frozenset(sss), sss_epoch).check()


def live(epoch=0, offset=0, priority=2**31 - 1) -> LiveInfo:
    return LiveInfo("x", 0, epoch=epoch, max_offset=offset, priority=priority)


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 5))
    sss = draw(st.sets(st.integers(1, n), min_size=1))
    master = draw(st.sampled_from(sorted(sss)) | st.none())
    state = group(n, master, sss, draw(st.integers(0, 50)), draw(st.integers(0, 50)))
    alive = {
        i: live(draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 3)))
        for i in draw(st.sets(st.integers(1, n)))
    }
    return state, alive


def model_winner(state: GroupState, alive, unclean: bool):
    """The rule written as plainly as possible: filter, then compare every pair."""
    pool = [i for i in state.members if i in alive and i in state.sync_state_set]
    if not pool and unclean:
        pool = [i for i in state.members if i in alive]
    if state.master_broker_id in pool:
        return "keep"
    best = None
    for i in pool:
        a = alive[i]
        if best is None:
            best = i
            continue
        b = alive[best]
        if (a.epoch, a.max_offset, -a.priority, -i) > (b.epoch, b.max_offset, -b.priority, -best):
            best = i
    return best


@given(scenarios(), st.booleans())
@settings(max_examples=400, deadline=None)
def test_election_matches_the_model(scenario, unclean):
    state, alive = scenario
    out = elect(state, alive, unclean=unclean)
    expected = model_winner(state, alive, unclean)
    if expected == "keep":
        assert out.code == RC.CONTROLLER_MASTER_STILL_EXIST and out.state is None
    elif expected is None:
        assert out.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
        if state.has_master:  # the deposed master is fenced by a new epoch; the set stays for a later election
            assert out.state.master_broker_id is None and out.state.master_epoch == state.master_epoch + 1
            assert out.state.sync_state_set == state.sync_state_set
        else:
            assert out.state is None
    else:
        new = out.state
        assert out.code == RC.SUCCESS and new.master_broker_id == expected
        assert new.master_epoch == state.master_epoch + 1
        assert new.sync_state_set == {expected} and new.sync_state_set_epoch == state.sync_state_set_epoch + 1
        assert new.master_address == state.members[expected].address
        if not unclean:
            assert expected in state.sync_state_set


@given(scenarios())
@settings(max_examples=300, deadline=None)
def test_a_member_outside_the_sync_state_set_is_never_elected_clean(scenario):
    state, alive = scenario
    out = elect(state, alive)
    if out.state is not None and out.state.master_broker_id is not None:
        assert out.state.master_broker_id in state.sync_state_set


@given(scenarios(), IDS)
@settings(max_examples=300, deadline=None)
def test_designated_switchover_only_to_an_eligible_member(scenario, designated):
    state, alive = scenario
    out = elect(state, alive, designated=designated)
    eligible = designated in alive and designated in state.sync_state_set and designated in state.members
    if not eligible:
        assert out.code == RC.CONTROLLER_ELECT_MASTER_FAILED and out.state is None
    elif designated == state.master_broker_id:
        assert out.code == RC.CONTROLLER_MASTER_STILL_EXIST
    else:
        assert out.ok and out.state.master_broker_id == designated


def test_the_rule_orders_epoch_then_offset_then_priority_then_id():
    state = group(4, None, (1, 2, 3, 4), master_epoch=5)
    assert elect(state, {1: live(1, 900), 2: live(2, 10)}).state.master_broker_id == 2
    assert elect(state, {1: live(2, 9), 2: live(2, 10)}).state.master_broker_id == 2
    assert elect(state, {1: live(2, 10, 5), 2: live(2, 10, 1)}).state.master_broker_id == 2
    assert elect(state, {3: live(2, 10, 1), 2: live(2, 10, 1)}).state.master_broker_id == 2


def test_unclean_election_is_off_unless_asked():
    state = group(3, 1, (1,))
    alive = {2: live(9, 9), 3: live(1, 1)}
    assert elect(state, alive).code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    assert elect(state, alive, unclean=True).state.master_broker_id == 2


def test_the_first_master_of_a_new_group_is_the_broker_that_asks():
    state = GroupState("c", "b", {1: Member("h:1"), 2: Member("h:2")})
    out = elect(state, {2: live()}, first_by=2)
    assert out.ok and out.state.master_broker_id == 2 and out.state.master_epoch == 1
    assert out.state.sync_state_set == {2}
    assert elect(state, {}, first_by=2).code == RC.CONTROLLER_ELECT_MASTER_FAILED
    # once the group had a master, asking is no shortcut: the rule applies
    had = out.state.replace(master_broker_id=None, master_address="", master_epoch=2)
    assert elect(had, {1: live()}, first_by=1).code == RC.CONTROLLER_MASTER_NOT_AVAILABLE


@st.composite
def alterations(draw):
    state, alive = draw(scenarios())
    n = len(state.members)
    sender = draw(st.integers(1, n))
    master_epoch = draw(st.sampled_from([state.master_epoch, state.master_epoch - 1, state.master_epoch + 1]))
    sss_epoch = draw(st.sampled_from([state.sync_state_set_epoch, state.sync_state_set_epoch - 1]))
    proposed = draw(st.sets(st.integers(1, n + 1), min_size=1))
    return state, alive, sender, master_epoch, sss_epoch, proposed


@given(alterations())
@settings(max_examples=500, deadline=None)
def test_only_the_current_master_with_current_epochs_alters_the_set(case):
    state, alive, sender, master_epoch, sss_epoch, proposed = case
    out = alter_sync_state_set(state, master_id=sender, master_epoch=master_epoch, new_set=proposed,
                               sync_state_set_epoch=sss_epoch, alive=alive)
    valid = (
        master_epoch == state.master_epoch
        and sender == state.master_broker_id
        and sss_epoch == state.sync_state_set_epoch
        and sender in proposed
        and proposed <= state.members.keys()
        and all(i == sender or i in alive for i in proposed)
    )
    assert out.ok == valid
    if master_epoch != state.master_epoch:
        assert out.code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    elif sender != state.master_broker_id:
        assert out.code == RC.CONTROLLER_INVALID_MASTER
    elif sss_epoch != state.sync_state_set_epoch:
        assert out.code == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    if not valid:
        assert out.state is None
    elif proposed == state.sync_state_set:
        assert out.state is None
    else:
        assert out.state.sync_state_set == proposed
        assert out.state.sync_state_set_epoch == state.sync_state_set_epoch + 1
        assert out.state.master_epoch == state.master_epoch


@given(st.lists(st.tuples(st.sampled_from(["elect", "alter", "kill", "revive"]), IDS, st.sets(IDS, min_size=1)),
                max_size=40))
@settings(max_examples=200, deadline=None)
def test_epochs_never_go_back_and_the_invariants_hold_through_any_history(ops):
    state = group(5, 1, (1,), master_epoch=1, sss_epoch=1)
    alive = {i: live(offset=i) for i in range(1, 6)}
    for op, broker, ids in ops:
        before = state
        if op == "kill":
            alive.pop(broker, None)
        elif op == "revive":
            alive[broker] = live(offset=broker)
        elif op == "elect":
            out = elect(state, alive)
            state = out.state or state
        else:  # the master proposes with the epochs it knows; a deposed one holds old ones
            sender = state.master_broker_id or broker
            out = alter_sync_state_set(state, master_id=sender, master_epoch=state.master_epoch,
                                       new_set=ids | {sender}, sync_state_set_epoch=state.sync_state_set_epoch,
                                       alive=alive)
            state = out.state or state
            stale = alter_sync_state_set(state, master_id=sender, master_epoch=state.master_epoch - 1,
                                         new_set=ids | {sender}, sync_state_set_epoch=state.sync_state_set_epoch,
                                         alive=alive)
            assert stale.code == RC.CONTROLLER_FENCED_MASTER_EPOCH and stale.state is None
        state.check()
        assert state.master_epoch >= before.master_epoch
        assert state.sync_state_set_epoch >= before.sync_state_set_epoch
        if state.master_broker_id != before.master_broker_id and state.master_broker_id is not None:
            assert state.master_broker_id in before.sync_state_set  # clean: only from the previous set


def test_broker_ids_are_applied_once_and_registered_before_use():
    out = apply_broker_id(None, "c", "b", 1, "h:1;100")
    assert out.ok and out.state.members[1].address == "h:1"
    state = out.state
    assert apply_broker_id(state, "c", "b", 1, "h:1;100").ok  # a retry of the same broker
    taken = apply_broker_id(state, "c", "b", 1, "h:9;200")
    assert taken.code == RC.CONTROLLER_BROKER_ID_INVALID and "next id (2)" in taken.remark
    assert apply_broker_id(state, "other", "b", 2, "h:2;1").code == RC.CONTROLLER_INVALID_REQUEST
    assert register_broker(state, 2, "h:2").code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    moved = register_broker(state, 1, "h:7").state
    assert moved.members[1].address == "h:7"


def test_stored_state_round_trips_and_refuses_corruption():
    state = group(3, 2, (1, 2), 7, 9)
    assert GroupState.from_json(state.to_json()) == state
    for bad in (b"[]", b"{", b'{"clusterName":"c","brokerName":"b","syncStateSet":[4]}',
                b'{"clusterName":"c","brokerName":"b","masterEpoch":-1}',
                b'{"clusterName":"c","brokerName":"b","members":{"x":{"address":"a"}}}'):
        try:
            GroupState.from_json(bad)
        except StateError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
