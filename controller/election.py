"""The controller's decisions on one broker group (RocketMQ 5's ReplicasInfoManager + DefaultElectPolicy), pure.

Every function takes the group's ``GroupState`` and the brokers alive now, and returns an ``Outcome``: a response
code with a remark, and the new state to write (``None``: nothing changes). The store writes that state by
compare-and-swap against the revision the state was read at, so two decisions never both apply.

Election (``elect``), spec rocketmq-replication.md §9.3:
1. candidates are the alive members of the SyncStateSet; only when there are none and ``unclean`` is set
   (``enableElectUncleanMaster``, off by default: it may lose acknowledged messages), every alive member;
2. a designated brokerId (an operator's switchover) wins if it is a candidate, else nobody is elected;
3. without a designation, a master that is still a candidate stays (CONTROLLER_MASTER_STILL_EXIST);
4. otherwise the best candidate by highest epoch, then highest max offset, then lowest election priority, then
   lowest brokerId (the last makes the choice deterministic);
5. a new master: masterEpoch + 1, syncStateSetEpoch + 1, syncStateSet = {new master};
6. no candidate: the master (if any) is cleared and masterEpoch + 1, so the deposed master is fenced; the
   SyncStateSet stays, so its members become electable again as soon as one of them is alive.
The first master of a group that never had one is the broker that asks for it (``first_by``), as in RocketMQ.

SyncStateSet changes (``alter_sync_state_set``), §9.4: only the current master, with the current masterEpoch and
syncStateSetEpoch, may change the set; the master stays in it; it may name only members that are alive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.state import GroupState, LiveInfo, Member, StateError
from remoting.codes import ResponseCode

RC = ResponseCode


@dataclass(frozen=True)
class Outcome:
    code: int
    remark: str
    state: GroupState | None = None  # the state to write; None: nothing to write

    @property
    def ok(self) -> bool:
        return self.code == RC.SUCCESS


def rank(broker_id: int, info: LiveInfo) -> tuple[int, int, int, int]:
    """Sort key of a candidate: the smallest is the best."""
    return (-info.epoch, -info.max_offset, info.priority, broker_id)


def candidates(state: GroupState, alive: Mapping[int, LiveInfo], *, unclean: bool = False) -> list[int]:
    live = [i for i in alive if i in state.members]
    clean = [i for i in live if i in state.sync_state_set]
    if clean:
        return sorted(clean)
    return sorted(live) if unclean else []


def _promote(state: GroupState, winner: int, why: str) -> Outcome:
    new = state.replace(
        master_broker_id=winner,
        master_address=state.members[winner].address,
        master_epoch=state.master_epoch + 1,
        sync_state_set=frozenset({winner}),
        sync_state_set_epoch=state.sync_state_set_epoch + 1,
    )
    return Outcome(RC.SUCCESS, f"brokerId {winner} elected master of {state.broker_name} "
                               f"(masterEpoch {new.master_epoch}): {why}", new)


def elect(
    state: GroupState,
    alive: Mapping[int, LiveInfo],
    *,
    designated: int | None = None,
    first_by: int | None = None,
    unclean: bool = False,
) -> Outcome:
    """Decide the group's master. ``alive``: the group's brokers alive now (id -> last heartbeat)."""
    name = state.broker_name
    if not state.has_master and state.master_epoch == 0 and first_by is not None:
        if first_by in state.members and first_by in alive:
            return _promote(state, first_by, "the first master of the group")
        return Outcome(RC.CONTROLLER_ELECT_MASTER_FAILED,
                       f"{name} has no master yet and brokerId {first_by} is not a registered, alive member: "
                       "apply for a brokerId, register and heartbeat first")
    pool = candidates(state, alive, unclean=unclean)
    if designated is not None:
        if designated not in pool:
            return Outcome(RC.CONTROLLER_ELECT_MASTER_FAILED,
                           f"brokerId {designated} of {name} cannot be elected: eligible now are {pool or 'none'} "
                           "(alive members of the SyncStateSet"
                           f"{'; any alive member, enableElectUncleanMaster is on' if unclean else ''})")
        if designated == state.master_broker_id:
            return Outcome(RC.CONTROLLER_MASTER_STILL_EXIST, f"brokerId {designated} is already master of {name}")
        return _promote(state, designated, "designated by the request")
    if state.master_broker_id in pool:
        return Outcome(RC.CONTROLLER_MASTER_STILL_EXIST,
                       f"brokerId {state.master_broker_id} of {name} is alive and stays master")
    if pool:
        winner = min(pool, key=lambda i: rank(i, alive[i]))
        info = alive[winner]
        return _promote(state, winner, f"epoch {info.epoch}, maxOffset {info.max_offset}, priority {info.priority}")
    remark = (f"no alive member of {name}'s SyncStateSet {sorted(state.sync_state_set)} to elect; "
              "the group takes no writes until one of them heartbeats again"
              + ("" if unclean else " (enableElectUncleanMaster=true would elect outside it and may lose messages)"))
    if state.has_master:
        cleared = state.replace(master_broker_id=None, master_address="", master_epoch=state.master_epoch + 1)
        return Outcome(RC.CONTROLLER_MASTER_NOT_AVAILABLE, remark, cleared)
    return Outcome(RC.CONTROLLER_MASTER_NOT_AVAILABLE, remark)


def alter_sync_state_set(
    state: GroupState,
    *,
    master_id: int,
    master_epoch: int,
    new_set: Iterable[int],
    sync_state_set_epoch: int,
    alive: Mapping[int, LiveInfo],
) -> Outcome:
    name = state.broker_name
    proposed = frozenset(new_set)
    if master_epoch != state.master_epoch:
        return Outcome(RC.CONTROLLER_FENCED_MASTER_EPOCH,
                       f"masterEpoch {master_epoch} is stale: {name} is at masterEpoch {state.master_epoch}; "
                       "re-read the replica info and act in the role it gives")
    if state.master_broker_id != master_id:
        return Outcome(RC.CONTROLLER_INVALID_MASTER,
                       f"brokerId {master_id} is not the master of {name} (the master is "
                       f"{state.master_broker_id if state.has_master else 'nobody'})")
    if sync_state_set_epoch != state.sync_state_set_epoch:
        return Outcome(RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                       f"syncStateSetEpoch {sync_state_set_epoch} is stale: {name} is at "
                       f"{state.sync_state_set_epoch}; re-read the SyncStateSet and propose again")
    if master_id not in proposed:
        return Outcome(RC.CONTROLLER_INVALID_REPLICAS, f"the master {master_id} must stay in the SyncStateSet")
    strangers = sorted(proposed - state.members.keys())
    if strangers:
        return Outcome(RC.CONTROLLER_INVALID_REPLICAS, f"brokerIds {strangers} are not members of {name}")
    dead = sorted(i for i in proposed if i != master_id and i not in alive)
    if dead:
        return Outcome(RC.CONTROLLER_INVALID_REPLICAS, f"brokerIds {dead} of {name} are not alive")
    if proposed == state.sync_state_set:
        return Outcome(RC.SUCCESS, "the SyncStateSet is unchanged")
    new = state.replace(sync_state_set=proposed, sync_state_set_epoch=state.sync_state_set_epoch + 1)
    return Outcome(RC.SUCCESS, f"SyncStateSet of {name} is now {sorted(proposed)} (epoch {new.sync_state_set_epoch})",
                   new)


def apply_broker_id(
    state: GroupState | None, cluster: str, broker_name: str, broker_id: int, check_code: str
) -> Outcome:
    """CONTROLLER_APPLY_BROKER_ID: take ``broker_id`` for the broker whose ``check_code`` (address;timestamp) is
    given; applying again with the same code succeeds (a broker that crashed during registration retries)."""
    if state is None:
        state = GroupState(cluster, broker_name)
    elif state.cluster_name != cluster:
        return Outcome(RC.CONTROLLER_INVALID_REQUEST,
                       f"{broker_name} belongs to cluster {state.cluster_name}, not {cluster}")
    if broker_id < 1:
        return Outcome(RC.CONTROLLER_BROKER_ID_INVALID, f"brokerId {broker_id} is below 1: ask for the next id")
    held = state.members.get(broker_id)
    if held is not None:
        if held.register_check_code == check_code:
            return Outcome(RC.SUCCESS, f"brokerId {broker_id} of {broker_name} is yours already")
        return Outcome(RC.CONTROLLER_BROKER_ID_INVALID,
                       f"brokerId {broker_id} of {broker_name} is taken: ask for the next id "
                       f"({state.next_broker_id()}) and apply again")
    address = check_code.split(";", 1)[0]
    members = {**state.members, broker_id: Member(address, check_code)}
    try:
        new = state.replace(members=members)
    except StateError as exc:
        return Outcome(RC.CONTROLLER_INVALID_REQUEST, str(exc))
    return Outcome(RC.SUCCESS, f"brokerId {broker_id} of {broker_name} applied", new)


def register_broker(state: GroupState | None, broker_id: int, address: str) -> Outcome:
    """CONTROLLER_REGISTER_BROKER: a member states its current address (a restarted broker may have moved)."""
    if state is None or broker_id not in state.members:
        return Outcome(RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                       f"brokerId {broker_id} is not a member: ask for the next brokerId and apply for it first")
    member = state.members[broker_id]
    if member.address == address:
        return Outcome(RC.SUCCESS, "registered")
    members = {**state.members, broker_id: Member(address, member.register_check_code)}
    master_address = address if state.master_broker_id == broker_id else state.master_address
    return Outcome(RC.SUCCESS, f"brokerId {broker_id} now at {address}",
                   state.replace(members=members, master_address=master_address))
