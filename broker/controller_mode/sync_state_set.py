"""The master's SyncStateSet rules (RocketMQ 5's AutoSwitchHAService), pure: which slaves count for SEND_OK, and
when to ask the controller to shrink or grow the set (spec rocketmq-replication.md §9.4).

- **Confirm offset:** the smallest ack of the members other than the master; with a set of the master alone, the
  master's max offset. A member without an ack (not connected) holds it back.
- **Acks during a change:** while a proposed set is in flight, acks count against the union of the current and the
  proposed set (apache/rocketmq #5663: counting against the new set alone lost messages during growth). So the
  master's counted set is always a superset of etcd's: a member is counted before the controller can add it, and
  stops counting only once the controller removed it. A change whose answer was lost (a timeout, a controller
  that lost etcd) stays ``proposed`` until the controller answers a retry or a replica-info read shows a newer
  ``syncStateSetEpoch`` (``settle``/``adopt``): dropping it early could leave etcd with a member the master no
  longer waits for (``fence`` relies on this).
- **Shrink:** a member that is not connected, or has not been caught up (ack >= the master's max offset at the
  time) for ``haMaxTimeSlaveNotCatchup``, leaves the set.
- **Grow:** a connected slave outside the set joins once its ack reached the confirm offset, the start of the
  master's current epoch (it caught up within this epoch, so it holds every message the epoch confirmed) and the
  highest offset the master answered SEND_OK for (``floor``: a member that reconnected reports from scratch, which
  can put the confirm offset below what was acknowledged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class SyncStateSetView:
    master_id: int
    members: frozenset[int]
    epoch: int  # syncStateSetEpoch
    epoch_start: int  # the start offset of the master's current masterEpoch
    proposed: frozenset[int] | None = None  # a change in flight
    last_caught_up: dict[int, float] = field(default_factory=dict)  # member -> last time it was caught up

    @property
    def size(self) -> int:
        """The brokers whose acks count, the master included (the union while a change is unsettled)."""
        return len(self.counted) + 1

    def adopt(self, members: frozenset[int], epoch: int) -> bool:
        """A replica-info read showed the controller's set; take it when it is newer (True when taken)."""
        if epoch <= self.epoch:
            return False
        self.members, self.epoch = frozenset(members), epoch
        return True

    def settle(self) -> None:
        """The controller answered the change (accepted or refused): count the members alone again."""
        self.proposed = None

    @property
    def counted(self) -> frozenset[int]:
        """Whose acks a SEND_OK needs now: the set, united with a proposed one while a change is in flight."""
        both = self.members | (self.proposed or frozenset())
        return both - {self.master_id}

    def confirm_offset(self, acks: Mapping[int, int], master_max: int) -> int:
        others = self.counted
        if not others:
            return master_max
        return min(min(acks.get(i, -1) for i in others), master_max)

    def observe(self, now: float, acks: Mapping[int, int], master_max: int) -> None:
        """Record which members are caught up now (call on acks and on every check)."""
        for i in self.members - {self.master_id}:
            ack = acks.get(i, -1)
            if ack >= master_max or i not in self.last_caught_up:
                self.last_caught_up.setdefault(i, now)
                if ack >= master_max:
                    self.last_caught_up[i] = now

    def shrink(self, now: float, acks: Mapping[int, int], connected: set[int], max_not_catchup_s: float
               ) -> frozenset[int] | None:
        """The set without the members that fell out, or None when all stay."""
        out = {i for i in self.members - {self.master_id}
               if i not in connected or now - self.last_caught_up.get(i, now) > max_not_catchup_s}
        return frozenset(self.members - out) if out else None

    def grow(self, acks: Mapping[int, int], connected: set[int], master_max: int, floor: int = 0
             ) -> frozenset[int] | None:
        """The set with every connected slave that caught up within this epoch, or None when nobody joins."""
        confirm = max(self.confirm_offset(acks, master_max), floor)
        joining = {i for i in connected - self.members
                   if acks.get(i, -1) >= confirm and acks.get(i, -1) >= self.epoch_start}
        return frozenset(self.members | joining) if joining else None
