"""HeldBytes: one process's cap on the bytes its remoting connections hold, summed over all of them.

``Limits`` bounds each connection, but a per-connection bound times many connections is no bound: 128 peers each
half-sending an 8 MiB frame grew a nameserver by 1 GiB. Every server-side connection reports what it holds (its
partial frame counted at the size its length field announces, unserved frames, requests being served, answers not
yet taken by the peer) to the process's one ``HeldBytes``. Beyond ``cap``:

- a connection that starts a frame larger than ``Limits.large_frame`` which would take the total past the cap is
  closed before its body arrives (small frames always pass: route queries, heartbeats and acks keep working);
- when the total passes the cap anyway (answers a peer does not read, many small frames), the connections holding
  the most are closed, largest first, until it is back under.

Each close is counted by reason (``closes``) for the metrics, and logged at most once per interval per reason (an
attack repeats them at will). Not thread-safe: one event loop.
"""

from __future__ import annotations

import logging
from typing import Protocol

from common.log import RateLimitedLog

log = logging.getLogger(__name__)

# 256 MiB: room for 64 peers each with a 4 MiB message (maxMessageSize) in flight or a full write buffer
# (Limits.write_high_water) at the same moment, which no client RocketMQ's defaults allow reaches in normal use,
# yet small beside the memory of any host that runs a broker (RocketMQ's start scripts size the JVM heap at 4-8 GiB).
DEFAULT_MAX_HELD_BYTES = 256 * 1024 * 1024
MAX_HELD_BYTES_KEY = "serverMaxHeldBytes"
FRAME_TIMEOUT_KEY = "serverFrameTimeoutMillis"

# Why a connection was closed by a bound (the label values of rocketmq_remoting_connections_closed_total).
CLOSE_REASONS = (
    "frame_refused",  # it started a large frame while the process held its cap
    "shed",  # the process was over its cap and this connection held the most
    "frame_timeout",  # a frame did not arrive whole within the frame deadline
    "unread_answers",  # the peer did not read its answers (stalled, or past the write cap)
    "malformed",  # bytes that are not a remoting frame
    # TLS ports (remoting.tls_listener): closed before the connection reached its protocol
    "tls_handshake_timeout",  # no first byte, or no finished handshake, within tls.server.handshakeTimeoutMillis
    "tls_handshake_failed",  # a client certificate from another CA, none where one is required, a bad record
    "plaintext_on_tls_port",  # a plaintext first byte on an enforcing port
    "tls_pending_full",  # too many connections still before their protocol
)


class Holder(Protocol):
    held: int  # bytes last reported

    @property
    def peer(self) -> str: ...

    def shed(self, reason: str) -> None: ...


refusal_log = RateLimitedLog(log)
shed_log = RateLimitedLog(log)


class HeldBytes:
    def __init__(self, cap: int = DEFAULT_MAX_HELD_BYTES, *, name: str = "remoting") -> None:
        if cap <= 0:
            raise ValueError(f"{MAX_HELD_BYTES_KEY} must be positive, got {cap}")
        self.cap = cap
        self.name = name
        self.total = 0
        self.closes: dict[str, int] = dict.fromkeys(CLOSE_REASONS, 0)
        self._holders: set[Holder] = set()

    @property
    def connections(self) -> int:
        return len(self._holders)

    def add(self, holder: Holder) -> None:
        self._holders.add(holder)

    def remove(self, holder: Holder) -> None:
        self._holders.discard(holder)
        self.total -= holder.held
        holder.held = 0

    def change(self, holder: Holder, held: int) -> None:
        """``holder`` holds ``held`` bytes now; past the cap, the largest holders are closed at once: one pass of
        the loop serves every ready connection, and 32 of them each answering a read's worth of requests took a
        process to 5 times its cap before a shed scheduled for later ran. ``holder`` may be among them (closing
        only marks it closing; its caller stops serving it)."""
        self.total += held - holder.held
        holder.held = held
        if self.total > self.cap:
            self._shed()

    def admits(self, holder: Holder, held: int) -> bool:
        """Whether ``holder`` may grow to ``held`` bytes without taking the process past the cap."""
        return self.total + held - holder.held <= self.cap

    def refused(self, holder: Holder, frame: int) -> None:
        self.closes["frame_refused"] += 1
        refusal_log.warning(
            "%s: closing the connection from %s: it started a %d-byte frame while this process's connections hold "
            "%d of the %d bytes %s allows (partial frames and unread answers); raise %s if legitimate peers meet "
            "this, else a peer is holding memory on purpose",
            self.name, holder.peer, frame, self.total, self.cap, MAX_HELD_BYTES_KEY, MAX_HELD_BYTES_KEY,
        )

    def closed(self, reason: str) -> None:
        self.closes[reason] = self.closes.get(reason, 0) + 1

    def _shed(self) -> None:
        over = self.total - self.cap
        victims: list[Holder] = []
        for holder in sorted(self._holders, key=_held, reverse=True):
            if over <= 0 or holder.held <= 0:
                break
            victims.append(holder)
            over -= holder.held
        for holder in victims:
            self.closes["shed"] += 1
            shed_log.warning(
                "%s: closing the connection from %s, which holds %d bytes: this process's connections hold %d "
                "bytes, more than %s=%d (raise it if legitimate peers meet this)",
                self.name, holder.peer, holder.held, self.total, MAX_HELD_BYTES_KEY, self.cap,
            )
            self.remove(holder)  # its buffers go with it now, whenever the transport reports the loss
            holder.shed("this process holds too many bytes for its peers")

    def snapshot(self) -> tuple[int, int, int, dict[str, int]]:
        """(held bytes, cap, open connections, closes by reason), for the metrics."""
        return self.total, self.cap, len(self._holders), dict(self.closes)


def _held(holder: Holder) -> int:
    return holder.held


