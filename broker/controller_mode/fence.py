"""The master's role lease: a controller-mode master answers SEND_OK only while the lease is valid (no split brain).

The controller takes a master for dead, and may elect another, only (a) once it has received no heartbeat from it for
``controllerHeartBeatTimeoutMills`` (T, sent in every heartbeat; the controller times it from the *receipt* of the
last one), or (b) when the connection that carried its heartbeats closes. The broker renews its lease from a
heartbeat sent at ``s`` (its own monotonic clock) only when that heartbeat was answered SUCCESS **and** a replica
info read sent after that answer still names this broker master at its own masterEpoch. Then:

- the controller received the heartbeat at ``r >= s``, and had not elected anybody else when it answered the read
  (after ``r``), so the latest heartbeat it holds for us at any later election is at least ``r``: no election of
  kind (a) can happen before ``r + T >= s + T``;
- the lease ends at ``s + T - margin`` (``controllerFenceMarginMills``), before that, with the margin absorbing the
  drift between the two hosts' clock rates over T; a renewal never shortens the lease, and a heartbeat sent after
  the lease ended can only renew it through the same read (so a master deposed while it was silent learns it from
  the read instead of reviving its lease);
- a new master answers SEND_OK only after its election, its role switch and its epoch entry, so later still.

Kind (b) happens when the master process dies (it answers nothing afterwards), or when the connection breaks while
both ends live. The broker revokes the lease at once when its own end of the controller connection closes or a
heartbeat fails, and whenever the controller names another master or a newer masterEpoch. The gap that remains is a
reset that reaches the controller but not the broker; closing it needs the lease to live in etcd (a key on a lease
the master renews itself, which the controller's election transaction requires to be gone): not built yet.

Every SEND_OK is decided after the replica acks, at the moment of the answer, by ``RoleLease.valid()``; a fenced
master answers SLAVE_NOT_AVAILABLE with a remark that says why (the message is stored on it but may be cut when it
rejoins as a slave: resend). Pure: the clock is injected.
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

    def remark(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        if self.valid_until == NEVER:
            reason = self.why
        else:
            reason = (f"the controller has not confirmed this master for {now - self.valid_until + self.span_s:.1f} s "
                      "(it may be partitioned from the controller)")
        return (f"fenced: {reason}; the message is stored here but may be cut when a new master is elected: "
                "resend it")
