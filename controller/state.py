"""A broker group's replica state in controller mode (RocketMQ 5's SyncStateInfo + BrokerReplicaInfo), as in etcd.

One ``GroupState`` per (clusterName, brokerName), serialised to one JSON object under one etcd key
(``controller.store``) and changed only by compare-and-swap, so every field below changes together or not at all:

    clusterName, brokerName   identity of the group (the key names them too)
    members                   {brokerId: Member(address, registerCheckCode)}: brokers that applied for an id
    masterBrokerId            the master's id, or None when the group has no master (none elected yet, or the
                              last election found no candidate)
    masterAddress             the master's remoting address ("" without a master)
    masterEpoch               bumped by every election, successful or not, so a deposed master's requests carry a
                              stale epoch and are refused
    syncStateSet              ids of the replicas in sync with the master (the master's own id among them)
    syncStateSetEpoch         bumped by every change of the set (an election resets it to {new master})

Invariants (``check()`` enforces them on load and before every write):
- every id in ``syncStateSet`` and ``masterBrokerId`` is a member; ids are >= 1 (0 is the nameserver's name for
  "the master", which a controller-mode broker registers under only while it is master);
- with a master, it is in ``syncStateSet`` and ``masterAddress`` is its member address; without one,
  ``masterAddress`` is empty;
- ``masterEpoch`` and ``syncStateSetEpoch`` never decrease (the store's CAS and ``election`` guarantee it).

Liveness is not here: brokers heartbeat every second, and writing that to etcd would turn every heartbeat into a
consensus round. ``LiveInfo`` (the last heartbeat's epoch, max offset, priority, timeout) lives in the active
controller's memory, as in RocketMQ's DefaultBrokerHeartbeatManager; a newly active controller waits one
heartbeat timeout before it treats a silent broker as dead. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import orjson

from remoting.headers import NumberError, parse_int

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
FIRST_BROKER_ID = 1  # RocketMQ's MixAll.FIRST_BROKER_CONTROLLER_ID
DEFAULT_ELECTION_PRIORITY = INT_MAX  # RocketMQ's brokerElectionPriority default; lower is preferred


NAME_RE = re.compile(r"[A-Za-z0-9_.%|-]{1,127}\Z")  # cluster and broker names: safe inside an etcd key


class StateError(ValueError):
    """A stored or proposed group state that breaks an invariant (names the field)."""


def name_problem(value: str, what: str) -> str | None:
    """Why ``value`` cannot name a cluster or broker group, or None."""
    if not NAME_RE.match(value):
        return (f"{what} {value[:60]!r} must be 1 to 127 letters, digits or '_', '.', '%', '|', '-' "
                "(it becomes part of an etcd key)")
    return None


@dataclass(frozen=True)
class Member:
    address: str
    register_check_code: str = ""


@dataclass(frozen=True)
class LiveInfo:
    """What the last heartbeat of one broker said (in memory only)."""

    address: str
    last_seen_ms: int
    timeout_ms: int = 10_000
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    priority: int = DEFAULT_ELECTION_PRIORITY
    all_ack: bool = False  # pyrmq: the broker declared allAckInSyncStateSet=true (unknown counts as false)

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.last_seen_ms < self.timeout_ms


@dataclass(frozen=True)
class GroupState:
    cluster_name: str
    broker_name: str
    members: dict[int, Member] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_address: str = ""
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def check(self) -> GroupState:
        for value, what in ((self.cluster_name, "clusterName"), (self.broker_name, "brokerName")):
            problem = name_problem(value, what)
            if problem:
                raise StateError(problem)
        for broker_id in self.members:
            if broker_id < FIRST_BROKER_ID:
                raise StateError(f"members: brokerId {broker_id} is below {FIRST_BROKER_ID}")
        strangers = self.sync_state_set - self.members.keys()
        if strangers:
            raise StateError(f"syncStateSet names {sorted(strangers)}, which are not members")
        if self.master_broker_id is None:
            if self.master_address:
                raise StateError("masterAddress is set but there is no masterBrokerId")
        else:
            member = self.members.get(self.master_broker_id)
            if member is None:
                raise StateError(f"masterBrokerId {self.master_broker_id} is not a member")
            if self.master_broker_id not in self.sync_state_set:
                raise StateError(f"masterBrokerId {self.master_broker_id} is not in the syncStateSet")
            if self.master_address != member.address:
                raise StateError(f"masterAddress {self.master_address!r} is not the master's ({member.address!r})")
        if self.master_epoch < 0 or self.sync_state_set_epoch < 0:
            raise StateError("epochs must not be negative")
        return self

    def replace(self, **changes) -> GroupState:
        return dataclasses.replace(self, **changes).check()

    @property
    def has_master(self) -> bool:
        return self.master_broker_id is not None

    def next_broker_id(self) -> int:
        return max(self.members, default=FIRST_BROKER_ID - 1) + 1

    def id_of(self, address: str) -> int | None:
        for broker_id, member in self.members.items():
            if member.address == address:
                return broker_id
        return None

    # JSON ---------------------------------------------------------------------------------------------------
    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "clusterName": self.cluster_name,
                "brokerName": self.broker_name,
                "members": {
                    str(i): {"address": m.address, "registerCheckCode": m.register_check_code}
                    for i, m in sorted(self.members.items())
                },
                "masterBrokerId": self.master_broker_id,
                "masterAddress": self.master_address,
                "masterEpoch": self.master_epoch,
                "syncStateSet": sorted(self.sync_state_set),
                "syncStateSetEpoch": self.sync_state_set_epoch,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> GroupState:
        """Parse and check stored state; ``StateError`` names what is wrong (a corrupt key is never half-used)."""
        try:
            obj = orjson.loads(data)
            if not isinstance(obj, dict):
                raise StateError("not a JSON object")
            members = {}
            for key, value in dict(obj.get("members") or {}).items():
                members[parse_int(key, 1, LONG_MAX, what="members key")] = Member(
                    _text(value.get("address"), "members.address"),
                    _text(value.get("registerCheckCode", ""), "members.registerCheckCode"),
                )
            master = obj.get("masterBrokerId")
            return cls(
                cluster_name=_text(obj.get("clusterName"), "clusterName"),
                broker_name=_text(obj.get("brokerName"), "brokerName"),
                members=members,
                master_broker_id=None if master is None else parse_int(master, 1, LONG_MAX, what="masterBrokerId"),
                master_address=_text(obj.get("masterAddress", ""), "masterAddress"),
                master_epoch=parse_int(obj.get("masterEpoch", 0), 0, INT_MAX, what="masterEpoch"),
                sync_state_set=frozenset(
                    parse_int(i, 1, LONG_MAX, what="syncStateSet") for i in obj.get("syncStateSet") or ()
                ),
                sync_state_set_epoch=parse_int(obj.get("syncStateSetEpoch", 0), 0, INT_MAX, what="syncStateSetEpoch"),
            ).check()
        except (orjson.JSONDecodeError, NumberError, AttributeError, TypeError) as exc:
            raise StateError(f"stored group state does not parse: {exc}") from None


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise StateError(f"{what} is {type(value).__name__}, not a string")
    return value
