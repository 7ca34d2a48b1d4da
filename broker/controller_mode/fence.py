"""When a controller-mode master may answer SEND_OK (no split brain), and its role lease.

**The rule.** A master answers SEND_OK for a put, at the moment of the answer and after the replica acks, when

(a) its role lease is valid (below), or
(b) every member of a SyncStateSet of at least two brokers acked the put, the broker knows the controller elects
    cleanly (``enableElectUncleanMaster=false``, told in every replica-info answer; unknown counts as unclean), the
    master runs with ``allAckInSyncStateSet=true``, and it has not learned that it was deposed.

Otherwise it answers SLAVE_NOT_AVAILABLE with a remark that says why (the message is stored on it but may be cut
when it rejoins as a slave: resend). ``SendFence.allows`` decides; ``SyncStateSetWaiter`` asks it.

**Why not an etcd lease alone.** Issue 23 asks both for "a master that cannot renew its lease stops SEND_OK" and for
"kill a majority of etcd: SYNC sends keep working while the SyncStateSet holds". With etcd's majority gone nothing
can be renewed, so a pure lease stops every write; (b) keeps them going, and is safe without any clock:

- the master keeps its *local* set a superset of etcd's (``sync_state_set``: it grows locally before it asks the
  controller, and shrinks locally only once the controller accepted; a change whose answer was lost keeps counting
  the union until a later answer or read settles it);
- a new master is elected only from etcd's set (clean election), so it is a member of the old master's local set
  whose ack every SEND_OK under (b) needed;
- a member acks only while it streams from the old master; becoming master stops its HA client first, so after
  its election it acks nothing more, and every SEND_OK of the old master is for a message the new master holds;
- a slave joins the set only once it holds everything that was answered SEND_OK (``grow``'s floor), so a member
  added later holds the earlier SEND_OKs too.

That proves no acknowledged message is lost, but not yet that two brokers never answer SEND_OK in the same period:
the old master may still release a put the new master acked *before* it stopped streaming, once the last other
member's ack arrives, after the new master's first SEND_OK. The old master's waiter gives up ``slaveTimeout`` (W)
after its put, and any put the new master acked was made before the new master last read from the old one; so a
broker that becomes master *after being a slave* answers its first SEND_OK no sooner than W after it last read a
byte from its old master (``SendFence.hold_until``; after a SIGKILL of the old master most of W has passed by the
time the new one takes over). The old master's last possible SEND_OK is then before the new master's first one. The
HA client resets its connection when it stops (SO_LINGER 0), which drops the acks its own kernel still holds; acks
already in the old master's receive buffer stay readable after the reset (Linux), and a stalled old master (SIGSTOP,
a blocking call) reads them before its loop runs the timer that expires the waiter, so the waiter checks W itself at
the answer and never gives SEND_OK after it (``ack_waiter``). What this relies on: the two clocks have the same rate
over W; W is counted from the waiter's start, one loop iteration after the append (a stall of the old master within
that iteration, after its HA master sent the bytes, would count it late); the SEND_OK is decided at the answer (a
stall after it delays only the delivery, as under any lease).

**Why the hold does not end sooner.** Ending it once every other member of the old master's set is this broker's
slave (so none can ack the old master) is not safe, and the model has a scenario for the first two reasons, in which
the early end overlaps SEND_OKs: (1) this broker knows the set as of its last read as a slave, while the old master
counts a local superset (a grow counts at once, before the controller accepts it; a read up to a heartbeat interval
old misses one it accepted); (2) the old master releases puts with no new ack when its counted set shrinks, on the
acks the members sent before they switched: a grow refused after the election (CONTROLLER_FENCED_MASTER_EPOCH settles
it back), or a shrink accepted before the election whose answer arrives within the request's timeout; (3) acks in the
old master's receive buffer (above). Only W bounds all three, and with ``allAckInSyncStateSet=false`` (one ack
releases) the early end has even less to stand on.

(b) does not cover ``allAckInSyncStateSet=false`` (one ack: the new master may not hold the message), a set of the
master alone, or unclean election (a new master from outside the set): there only (a) gives SEND_OK.

**The role lease (a).** The controller takes a master for dead, and may elect another, only (1) once it has received
no heartbeat from it for ``controllerHeartBeatTimeoutMills`` (T, sent in every heartbeat; timed from the *receipt*
of the last one), or (2) when the connection that carried its heartbeats closes, and only if the master declared
``allAckInSyncStateSet`` in its heartbeats and the controller elects cleanly: then (b)'s argument covers it, since
an immediate election can only promote a member whose ack the old master needs (``controller.manager``). Otherwise
a closed connection leaves the master alive until T, which the lease covers. The broker renews its lease from a
heartbeat sent at ``s`` (its own monotonic clock) only when that heartbeat was answered SUCCESS **and** a replica
info read sent after that answer still names this broker master at its own masterEpoch. Then:

- the controller received the heartbeat at ``r >= s``, and had not elected anybody else when it answered the read
  (after ``r``), so the latest heartbeat it holds for us at any later election is at least ``r``: no election of
  kind (1) can happen before ``r + T >= s + T``;
- the lease ends at ``s + T - margin`` (``controllerFenceMarginMills``), before that, with the margin absorbing the
  drift between the two hosts' clock rates over T; a renewal never shortens the lease, and a heartbeat sent after
  the lease ended can only renew it through the same read (so a master deposed while it was silent learns it from
  the read instead of reviving its lease);
- a new master answers SEND_OK only after its election, its role switch and its epoch entry, so later still.

The broker also ends the lease when its end of the controller connection closes or a heartbeat fails, and is
*deposed* (no SEND_OK by either rule) once the controller names another master or a newer masterEpoch.

**Assumptions.** Every controller instance runs with the same ``enableElectUncleanMaster``: the broker learns it
from the answers it gets, so an instance switched to unclean election while a master serves under (b) could elect
outside the set before the master hears of it (switch it with the group stopped). A set of one is left to the lease
on purpose: under clean election nobody else could be elected from it either, but a lone master cut off from the
controller must stop (issue 23, item 2), and its data would be on no other broker. Every member of a group runs
with the same ``slaveTimeout``: a new master holds for its own W, and an old master's waiters live for theirs.

**Checked by** ``tests/unit/broker/test_fence_model.py``: a Hypothesis model of three brokers with the real
election, SyncStateSet and fence rules under partitions, late acks, lost answers, resets only the controller sees
and etcd losing its majority (no SEND_OK lost from etcd's set, the local set a superset of etcd's, SEND_OKs never
back to an older masterEpoch), with one scenario per guard that fails without it, and the scenarios in which an
early end of the hold overlaps SEND_OKs. Pure: the clock is injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable

NEVER = float("-inf")


class RoleLease:
    def __init__(self, timeout_ms: int, margin_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        if margin_ms >= timeout_ms:
            raise ValueError("the fence margin must be below the heartbeat timeout")
        self.span_s = (timeout_ms - margin_ms) / 1000.0
        self.clock = clock
        self.valid_until = NEVER
        self.why = "this broker has not been confirmed as master by the controller yet"

    def renew(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` was answered and a later read still names us master at our epoch."""
        self.valid_until = max(self.valid_until, sent_at + self.span_s)

    def revoke(self, why: str) -> None:
        self.valid_until = NEVER
        self.why = why

    def valid(self, now: float | None = None) -> bool:
        return (self.clock() if now is None else now) < self.valid_until

    def reason(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        if self.valid_until == NEVER:
            return self.why
        return (f"the controller has not confirmed this master for {now - self.valid_until + self.span_s:.1f} s "
                "(it may be partitioned from the controller)")

    def remark(self, now: float | None = None) -> str:
        return fenced_remark(self.reason(now))


def fenced_remark(reason: str) -> str:
    return (f"fenced: {reason}; the message is stored here but may be cut when a new master is elected: "
            "resend it")


class SendFence:
    """The master's SEND_OK rule: lease (a) or a fully acked SyncStateSet of >= 2 under clean election (b)."""

    def __init__(self, lease: RoleLease) -> None:
        self.lease = lease
        self.clean_election: bool | None = None  # from the controller's replica-info answers; None: not told yet
        self.deposed = ""  # why this master knows it was replaced ("" while it does not)
        self.hold_until = NEVER  # no SEND_OK before this (lease clock): the old master's waiters must have expired

    def begin_term(self, why: str, hold_until: float = NEVER) -> None:
        """A new term as master: the lease is not confirmed yet, the broker is not deposed, and when it streamed
        from the old master until recently, its first SEND_OK waits for ``hold_until``."""
        self.lease.revoke(why)
        self.deposed = ""
        self.hold_until = hold_until

    def hold_s(self, now: float | None = None) -> float:
        """Seconds a released put must still wait before its answer (0: none)."""
        now = self.lease.clock() if now is None else now
        return max(0.0, self.hold_until - now)

    def depose(self, why: str) -> None:
        self.lease.revoke(why)
        self.deposed = why

    def by_set(self, set_size: int, all_ack: bool) -> bool:
        """Rule (b) apart from the acks themselves (the waiter answers only once every counted member acked)."""
        return not self.deposed and all_ack and set_size >= 2 and self.clean_election is True

    def allows(self, set_size: int, all_ack: bool, now: float | None = None) -> bool:
        """``set_size``: the master's local SyncStateSet (the union while a change is unsettled), master included."""
        if self.deposed:
            return False
        return self.lease.valid(now) or self.by_set(set_size, all_ack)

    def remark(self, set_size: int, all_ack: bool, now: float | None = None) -> str:
        if self.deposed:
            return fenced_remark(self.deposed)
        why = self.lease.reason(now)
        if not all_ack:
            why += "; with allAckInSyncStateSet=false only the lease allows SEND_OK"
        elif set_size < 2:
            why += "; the SyncStateSet holds the master alone, so no replica's ack can stand in for the lease"
        elif self.clean_election is not True:
            why += ("; the controller has not said it elects cleanly (enableElectUncleanMaster=false), so the "
                    "SyncStateSet's acks cannot stand in for the lease")
        return fenced_remark(why)
