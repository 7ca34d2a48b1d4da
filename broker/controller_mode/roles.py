"""What role the controller's replica info gives this broker, and the settings a ``BrokerServer`` runs that role with.

In controller mode a master runs as SYNC_MASTER registered as brokerId 0 (RocketMQ's rule: the nameserver knows the
master as id 0); a slave registers with its controller-assigned id (>= 1) and streams from the master's HA address,
which it learned from the master itself. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from broker.config import BrokerRole, BrokerSettings
from common.errors import PyrmqError


class RoleSwitchError(PyrmqError):
    """A role the controller gave could not be taken now (the next round tries again)."""


class Kind(enum.Enum):
    MASTER = "master"
    SLAVE = "slave"
    NONE = "none"  # the group has no master: wait (and ask for an election)


@dataclass(frozen=True)
class Role:
    kind: Kind
    master_epoch: int = 0
    master_id: int | None = None
    master_addr: str = ""


def decide(my_id: int, master_id: int | None, master_addr: str, master_epoch: int) -> Role:
    if master_id is None or not master_addr:
        return Role(Kind.NONE, master_epoch)
    if master_id == my_id:
        return Role(Kind.MASTER, master_epoch, my_id, master_addr)
    return Role(Kind.SLAVE, master_epoch, master_id, master_addr)


def same_role(current: Role | None, wanted: Role) -> bool:
    """True when a running broker in ``current`` needs no switch to serve ``wanted``. Any new masterEpoch needs one,
    even with the same master (re-elected after a period without one): the master records a new epoch entry, and a
    slave must copy it, or its history would call that reign's writes the previous epoch's."""
    if current is None or current.kind is not wanted.kind or current.master_epoch != wanted.master_epoch:
        return False
    if wanted.kind is Kind.SLAVE:
        return current.master_id == wanted.master_id and current.master_addr == wanted.master_addr
    return True


def role_settings(base: BrokerSettings, role: Role, my_id: int, master_ha_addr: str = "") -> BrokerSettings:
    if role.kind is Kind.MASTER:
        return replace(base, broker=replace(base.broker, broker_id=0),
                       store=replace(base.store, broker_role=BrokerRole.SYNC_MASTER, ha_master_address=""))
    return replace(base, broker=replace(base.broker, broker_id=my_id),
                   store=replace(base.store, broker_role=BrokerRole.SLAVE, ha_master_address=master_ha_addr))
