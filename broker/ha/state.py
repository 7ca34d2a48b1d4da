"""HA decisions (pure) and the runtime info behind ``mqctl ha status``.

Pure functions, no I/O and no clock reads, so they can be tested against a model (STYLE §2):
- ``check_hello``: does this hello claim to be a slave of this broker group? (Whether it is one is settled by the
  proof of the secret that follows, ``proof_matches``.)
- ``admit``: may an authenticated (or, in unsafe mode, unauthenticated) slave take the brokerId it claims?
- ``choose_start``: where the master starts streaming to a slave (DESIGN §3: MIN_OFFSET / LAST_FILE, explicit
  errors for a slave behind the master's min or ahead of its max);
- ``judge_report``: what a slave's 8-byte report means on an established connection (RocketMQ #3015: an ack
  beyond the master's max, or beyond what this connection was sent, closes it; acks never decrease);
- ``task_end``: why a link closes when its reader or writer task ends (either end of the link).

``SlaveLink`` / ``SlaveClientInfo`` are plain records owned by the event loop (not thread-safe).
"""

from __future__ import annotations

import asyncio
import enum
import hmac as _hmac
from dataclasses import dataclass, field

from broker.config import CatchUpFrom
from remoting.ha_codec import ErrorCode, ProtocolError
from remoting.ha_handshake import Hello

# What a peer that has not authenticated is told: enough for an operator to know where to look, nothing about
# this master (no offsets, no names). The master's log says exactly what did not match.
REFUSED_TO_PEER = ("HA handshake refused: brokerClusterName, brokerName, brokerId (>= 1) or haAuthSecret do not "
                   "match this master; its log says which")


class ConnState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"  # waiting for the hello and the first report
    TRANSFER = "TRANSFER"  # streaming
    CLOSED = "CLOSED"


class SlaveState(enum.Enum):
    """How ``mqctl haStatus`` shows an HA link: a slave on its master (all four), the master on its slave (OK,
    STALE, DISCONNECTED). When STALE sets in: ``broker/ha/status.py``."""

    OK = "OK"
    FALL_BEHIND = "FALL_BEHIND"
    STALE = "STALE"  # connected, but the peer has been silent for longer than its heartbeat allows
    DISCONNECTED = "DISCONNECTED"


class CloseReason(enum.Enum):
    PEER_CLOSED = "peer closed the connection"
    READ_IDLE = "no bytes read within haHousekeepingInterval"
    REFUSED = "peer refused"
    HANDSHAKE_TIMEOUT = "handshake not completed in time"
    REPLACED = "a newer connection of the same slave took over"
    ACK_BEYOND_MAX = "ack beyond the master's max offset"
    PROTOCOL_ERROR = "protocol error"
    CATCH_UP_ERROR = "slave offset outside the master's range"
    OFFSET_MISMATCH = "frame offset differs from the local max"
    SHUTDOWN = "service stopping"
    IO_ERROR = "socket error"
    ADDRESS_CHANGED = "master address changed"


def task_end(task: asyncio.Task) -> tuple[CloseReason, BaseException | None]:
    """Why an HA link closes when its finished reader or writer ``task`` ends it, and the error the task raised:
    SHUTDOWN when cancelled, what it returned (PEER_CLOSED for None), PROTOCOL_ERROR for a ``ProtocolError``,
    IO_ERROR for any other error. The caller logs the error as its end of the link sees it."""
    if task.cancelled():
        return CloseReason.SHUTDOWN, None
    exc = task.exception()
    if exc is None:
        return task.result() or CloseReason.PEER_CLOSED, None
    return (CloseReason.PROTOCOL_ERROR if isinstance(exc, ProtocolError) else CloseReason.IO_ERROR), exc


@dataclass(frozen=True, slots=True)
class Refusal:
    code: ErrorCode
    message: str


def check_hello(hello: Hello, *, cluster: str, broker_name: str) -> Refusal | None:
    """None when the hello claims a slave of this broker group; else why not (for the master's log only)."""
    if hello.cluster != cluster or hello.broker_name != broker_name:
        return Refusal(ErrorCode.PEER_REFUSED,
                       f"this HA port serves {cluster}/{broker_name}, the peer is {hello.cluster}/{hello.broker_name}; "
                       "check the slave's brokerClusterName/brokerName and haMasterAddress")
    if hello.broker_id <= 0:
        return Refusal(ErrorCode.PEER_REFUSED,
                       f"brokerId {hello.broker_id} is not a slave id; a slave needs brokerId >= 1")
    return None


def proof_matches(expected: bytes, got: bytes) -> bool:
    """Constant-time comparison of a received proof with the one the secret gives."""
    return _hmac.compare_digest(expected, got)


class Admission(enum.Enum):
    NEW = "NEW"  # no live connection has this brokerId
    REPLACE = "REPLACE"  # the connection that has it read nothing for haHousekeepingInterval: proven dead
    DUPLICATE = "DUPLICATE"  # a live one has it and the newcomer proved the secret too: two claimants, an alarm
    REFUSE = "REFUSE"  # a live one has it and nothing proves the newcomer is a slave at all (no secret)


def admit(*, authenticated: bool, live_with_same_id: bool, old_silent_s: float = 0.0,
          idle_s: float = float("inf")) -> Admission:
    """One live connection per brokerId, and it is never displaced while it lives: a newcomer takes a brokerId
    only when no connection has it or the one that has it read nothing for ``idle_s`` (haHousekeepingInterval,
    ``old_silent_s`` ago its last read). Knowing the secret is no proof of being *that* slave: a second
    authenticated claimant of a live brokerId is refused and reported (DUPLICATE), never a silent swap."""
    if not live_with_same_id:
        return Admission.NEW
    if old_silent_s >= idle_s:
        return Admission.REPLACE
    return Admission.DUPLICATE if authenticated else Admission.REFUSE


@dataclass(frozen=True, slots=True)
class StartDecision:
    start: int  # -1 with an error
    error: Refusal | None = None
    reason: str = ""


def choose_start(request: int, *, master_min: int, master_max: int, file_size: int,
                 catch_up_from: CatchUpFrom) -> StartDecision:
    """Where to stream from for a slave whose first report is ``request`` (its commitlog end)."""
    if request > master_max:
        return StartDecision(-1, Refusal(
            ErrorCode.SLAVE_AHEAD_OF_MASTER_MAX,
            f"slave store ends at {request}, beyond the master's max offset {master_max}: the slave holds bytes the "
            "master never wrote (an old master rejoined as slave?); wipe or truncate the slave store"))
    if request == 0:
        if catch_up_from is CatchUpFrom.LAST_FILE:
            start = max(0, master_max - master_max % file_size)
            return StartDecision(start, reason=f"empty slave, haSlaveCatchUpFrom=LAST_FILE: from {start}")
        return StartDecision(master_min, reason=f"empty slave, haSlaveCatchUpFrom=MIN_OFFSET: from {master_min}")
    if request < master_min:
        return StartDecision(-1, Refusal(
            ErrorCode.SLAVE_BEHIND_MASTER_MIN,
            f"slave store ends at {request}, before the master's min offset {master_min}: the bytes it needs were "
            "deleted on the master; wipe the slave store (it then copies from the master's min offset)"))
    return StartDecision(request, reason=f"slave resumes at its own max {request}")


class Verdict(enum.Enum):
    ACK = "ACK"  # advance
    SAME = "SAME"  # heartbeat repeating the last ack
    BEYOND_MAX = "BEYOND_MAX"  # close (#3015)
    BEYOND_SENT = "BEYOND_SENT"  # close: acks bytes this connection never sent
    DECREASED = "DECREASED"  # close: acks never go back on one connection


def judge_report(value: int, *, last_ack: int, sent_upto: int, master_max: int) -> Verdict:
    """A report on an established connection. ``sent_upto`` = end of the last frame written to this slave."""
    if value > master_max:
        return Verdict.BEYOND_MAX
    if value > max(sent_upto, last_ack):
        return Verdict.BEYOND_SENT
    if value < last_ack:
        return Verdict.DECREASED
    return Verdict.SAME if value == last_ack else Verdict.ACK


def slave_state(*, connected: bool, silent_ms: int, stale_after_ms: int, ack_offset: int, master_max: int,
                fallbehind_max: int) -> SlaveState:
    """A slave as its master sees it. STALE before FALL_BEHIND: the ack of a silent slave is old news."""
    link = link_state(connected=connected, silent_ms=silent_ms, stale_after_ms=stale_after_ms)
    if link is not SlaveState.OK:
        return link
    return SlaveState.OK if master_max - ack_offset < fallbehind_max else SlaveState.FALL_BEHIND


def link_state(*, connected: bool, silent_ms: int, stale_after_ms: int) -> SlaveState:
    """OK, STALE (nothing read for more than ``stale_after_ms``) or DISCONNECTED: either end of a link."""
    if not connected:
        return SlaveState.DISCONNECTED
    return SlaveState.STALE if silent_ms > stale_after_ms else SlaveState.OK


@dataclass(slots=True)
class SlaveLink:
    """One slave as the master sees it (kept after disconnect for ``ha status``)."""

    slave_addr: str  # the HA socket's peer (host:ephemeral port)
    broker_id: int
    broker_addr: str = ""  # the slave's brokerIP1:listenPort from its hello; "" when it did not send one
    state: ConnState = ConnState.HANDSHAKE
    request_offset: int = -1
    ack_offset: int = -1
    transfer_from: int = -1
    next_transfer: int = -1
    transferred_bytes: int = 0
    frames: int = 0
    sendfile_frames: int = 0
    last_ack_ms: int = 0  # epoch ms of the last ack that advanced
    last_read_ms: int = 0  # epoch ms of the last bytes read (an ack or a heartbeat report)
    last_read_mono: float = 0.0
    last_write_mono: float = 0.0
    connected_at_ms: int = 0
    close_reason: str = ""
    authenticated: bool = False  # proved the cluster's secret (False only on a master in unsafe mode)
    closed_mono: float = 0.0  # monotonic time of the close; the row leaves haStatus keep-interval later


@dataclass(slots=True)
class HACounters:
    """Counters for the metrics issue (monotonic; never reset while the process lives)."""

    accepted: int = 0
    refused: int = 0
    replaced: int = 0
    handshakes_evicted: int = 0  # silent handshakes closed to make room for a newcomer
    # brokerId -> authenticated newcomers refused because a live connection had that brokerId (an alarm)
    duplicate_claims: dict[int, int] = field(default_factory=dict)
    closed: int = 0
    bytes_sent: int = 0
    frames_sent: int = 0
    sendfile_frames: int = 0
    heartbeats_sent: int = 0
    error_frames_sent: int = 0
    acks: int = 0
    reconnects: int = 0  # slave side
    connects: int = 0
    bytes_received: int = 0
    frames_received: int = 0
    reports_sent: int = 0
    offset_mismatches: int = 0
    error_frames_received: int = 0
