"""HA stream codec: RocketMQ's replication frames plus pyrmq's error frame, after the handshake (``ha_handshake``)
has let the slave in. Pure: no sockets.

Every integer is big-endian two's complement (Java ``ByteBuffer``). The stream between a slave and its master,
once the handshake is done:

Slave -> master: **report** = ``i64 slaveMaxPhyOffset`` (8 bytes, nothing else). The same word
is the start request (first one), the ack and the heartbeat (RocketMQ §3.2). Only the newest complete word
of a read counts.

Master -> slave: **frame header** (12 bytes, ``ha_wire``) + body::

    0   8  phy_offset  i64, commitlog offset of body[0] (heartbeat: the next offset the master will send)
    8   4  body_size   i32, 0 = heartbeat, 1..haTransferBatchSize = data, ERROR_MARKER (-1) = error frame
    12  s  body        raw commitlog bytes of ONE file (a frame never crosses a commitlog file end)

Master -> slave: **error frame** (pyrmq), the last thing the master sends before it closes::

    0   8  phy_offset  i64, the offset the error is about (the slave's request), -1 when none
    8   4  body_size   i32 = ERROR_MARKER (-1)
    12  2  code        u16, ErrorCode
    14  8  master_min  i64, master commitlog min offset at the time (-1 to a peer that has not authenticated)
    22  8  master_max  i64, master commitlog max offset at the time (-1 to a peer that has not authenticated)
    30  2  msg_len     u16 (<= MAX_ERROR_MESSAGE_BYTES)
    32  m  message     utf-8, what happened and what to do

The master's challenge (``ha_handshake``) travels in this stream too, as a header with the CHALLENGE_MARKER size,
so the frame parsers here return it as a ``Challenge``. Any other negative ``body_size`` or one above the
receiver's ``haTransferBatchSize`` is a ProtocolError; so is a truncated structure. Parsers come in two shapes:
``read_*`` coroutines over a ``Reader`` (anything with ``readexactly``, e.g. ``asyncio.StreamReader``), and
``decode_*`` / ``parse_frames`` (zero-copy, over a caller's buffer) / ``FrameDecoder`` / ``ReportDecoder`` over
bytes, for callers that read large chunks and want one ack per read batch. All of it is task-safe because it
holds no shared state; decoders are per connection.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from remoting.ha_handshake import CHALLENGE_BODY_SIZE, CHALLENGE_SIZE, Challenge, decode_challenge
from remoting.ha_wire import CHALLENGE_MARKER, ERROR_MARKER, HEADER, HEADER_SIZE, ProtocolError, Reader, read_exactly

MAX_ERROR_MESSAGE_BYTES = 4096

REPORT = struct.Struct(">q")
ERROR_FIXED = struct.Struct(">HqqH")

REPORT_SIZE = REPORT.size  # 8
ERROR_FIXED_SIZE = ERROR_FIXED.size  # 20


class ErrorCode(enum.IntEnum):
    """Why a master refuses to (go on) serving a slave. Carried in the error frame."""

    SLAVE_BEHIND_MASTER_MIN = 1  # slave's offset < master's min: the bytes it needs were deleted
    SLAVE_AHEAD_OF_MASTER_MAX = 2  # slave has bytes the master never had (e.g. after a manual failover)
    PEER_REFUSED = 3  # handshake failed: wrong magic/version, cluster, brokerName, brokerId or proof
    REPLACED = 4  # a newer connection with the same brokerId took over
    PROTOCOL_ERROR = 5  # the slave sent something invalid (decreasing ack, ack beyond what was sent)
    SHUTTING_DOWN = 6  # the master is stopping


@dataclass(frozen=True, slots=True)
class Frame:
    """A master -> slave data or heartbeat frame (``body`` is a memoryview when it came from ``parse_frames``)."""

    phy_offset: int
    body: bytes | memoryview

    @property
    def is_heartbeat(self) -> bool:
        return len(self.body) == 0


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    phy_offset: int
    code: ErrorCode
    master_min: int
    master_max: int
    message: str


# ---------------------------------------------------------------------------------------------------- encode
def encode_report(offset: int) -> bytes:
    if offset < 0:
        raise ValueError(f"report offset must be >= 0, got {offset}")
    return REPORT.pack(offset)


def encode_header(phy_offset: int, body_size: int) -> bytes:
    if phy_offset < 0 or body_size < 0:
        raise ValueError(f"frame header needs phy_offset >= 0 and body_size >= 0, got {phy_offset}, {body_size}")
    return HEADER.pack(phy_offset, body_size)


def encode_frame(phy_offset: int, body: bytes | memoryview = b"") -> bytes:
    return encode_header(phy_offset, len(body)) + bytes(body)


def encode_heartbeat(phy_offset: int) -> bytes:
    return encode_header(phy_offset, 0)


def encode_error(code: ErrorCode, message: str, *, phy_offset: int = -1, master_min: int = -1,
                 master_max: int = -1) -> bytes:
    msg = message.encode("utf-8")[:MAX_ERROR_MESSAGE_BYTES]
    return HEADER.pack(phy_offset, ERROR_MARKER) + ERROR_FIXED.pack(int(code), master_min, master_max, len(msg)) + msg


# ---------------------------------------------------------------------------------------------------- decode
def _check_body_size(phy_offset: int, size: int, max_body: int) -> None:
    if phy_offset < 0 and size not in (ERROR_MARKER, CHALLENGE_MARKER):
        raise ProtocolError(f"frame phy_offset {phy_offset} is negative", field="phy_offset", value=phy_offset)
    if size > max_body:
        raise ProtocolError(f"frame body_size {size} exceeds haTransferBatchSize {max_body}",
                            field="body_size", value=size,
                            hint="master and slave must use the same haTransferBatchSize; closing the connection")
    if size < 0 and size not in (ERROR_MARKER, CHALLENGE_MARKER):
        raise ProtocolError(f"frame body_size {size} is negative and neither the error nor the challenge marker",
                            field="body_size", value=size)


def decode_report(data: bytes | memoryview) -> int:
    if len(data) != REPORT_SIZE:
        raise ProtocolError(f"report needs {REPORT_SIZE} bytes, got {len(data)}", field="report", value=len(data))
    value = REPORT.unpack(data)[0]
    if value < 0:
        raise ProtocolError(f"reported offset {value} is negative", field="report", value=value)
    return value


def decode_header(data: bytes | memoryview, max_body: int) -> tuple[int, int]:
    """12 header bytes -> (phy_offset, body_size); body_size may be ERROR_MARKER or CHALLENGE_MARKER."""
    if len(data) != HEADER_SIZE:
        raise ProtocolError(f"frame header needs {HEADER_SIZE} bytes, got {len(data)}", field="header")
    phy_offset, size = HEADER.unpack(data)
    _check_body_size(phy_offset, size, max_body)
    return phy_offset, size


def _decode_error_fixed(phy_offset: int, data: bytes | memoryview) -> tuple[int, int, int, int]:
    code, mn, mx, mlen = ERROR_FIXED.unpack(data)
    if mlen > MAX_ERROR_MESSAGE_BYTES:
        raise ProtocolError(f"error frame message of {mlen} bytes exceeds {MAX_ERROR_MESSAGE_BYTES}",
                            field="msg_len", value=mlen)
    return code, mn, mx, mlen


def _make_error(phy_offset: int, code: int, mn: int, mx: int, msg: bytes | memoryview) -> ErrorFrame:
    try:
        ecode = ErrorCode(code)
    except ValueError:
        raise ProtocolError(f"unknown error frame code {code}", field="code", value=code) from None
    return ErrorFrame(phy_offset, ecode, mn, mx, bytes(msg).decode("utf-8", "replace"))


def decode_frame(data: bytes | memoryview, max_body: int) -> tuple[Frame | ErrorFrame | Challenge, int]:
    """Parse one whole frame at the start of ``data``; returns (frame, bytes consumed). Truncated -> ProtocolError."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"frame header truncated: {len(data)} of {HEADER_SIZE} bytes", field="header")
    phy_offset, size = decode_header(data[:HEADER_SIZE], max_body)
    if size == CHALLENGE_MARKER:
        if len(data) < CHALLENGE_SIZE:
            raise ProtocolError(f"challenge truncated: {len(data)} of {CHALLENGE_SIZE} bytes", field="challenge")
        return decode_challenge(data[HEADER_SIZE:CHALLENGE_SIZE]), CHALLENGE_SIZE
    if size == ERROR_MARKER:
        fixed_end = HEADER_SIZE + ERROR_FIXED_SIZE
        if len(data) < fixed_end:
            raise ProtocolError(f"error frame truncated: {len(data)} of {fixed_end} bytes", field="error")
        code, mn, mx, mlen = _decode_error_fixed(phy_offset, data[HEADER_SIZE:fixed_end])
        if len(data) < fixed_end + mlen:
            raise ProtocolError(f"error frame truncated: {len(data)} of {fixed_end + mlen} bytes", field="error")
        return _make_error(phy_offset, code, mn, mx, data[fixed_end:fixed_end + mlen]), fixed_end + mlen
    if len(data) < HEADER_SIZE + size:
        raise ProtocolError(f"frame body truncated: {len(data) - HEADER_SIZE} of {size} bytes", field="body")
    return Frame(phy_offset, bytes(data[HEADER_SIZE:HEADER_SIZE + size])), HEADER_SIZE + size


async def read_report(reader: Reader) -> int:
    return decode_report(await read_exactly(reader, REPORT_SIZE, "report"))


async def read_frame(reader: Reader, max_body: int) -> Frame | ErrorFrame | Challenge:
    phy_offset, size = decode_header(await read_exactly(reader, HEADER_SIZE, "frame header"), max_body)
    if size == CHALLENGE_MARKER:
        return decode_challenge(await read_exactly(reader, CHALLENGE_BODY_SIZE, "challenge"))
    if size == ERROR_MARKER:
        code, mn, mx, mlen = _decode_error_fixed(phy_offset, await read_exactly(reader, ERROR_FIXED_SIZE, "error"))
        return _make_error(phy_offset, code, mn, mx, await read_exactly(reader, mlen, "error message"))
    return Frame(phy_offset, await read_exactly(reader, size, "frame body") if size else b"")


# ------------------------------------------------------------------------------------------ incremental
class ReportDecoder:
    """Slave reports from arbitrary chunks; keeps only the newest complete word (RocketMQ's ``pos - pos % 8``)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> int | None:
        """Returns the newest complete report in ``data`` (plus leftovers), or None when no word completed."""
        buf = self._pending + data if self._pending else data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._pending = bytes(buf[whole:])
        if whole == 0:
            return None
        return decode_report(buf[whole - REPORT_SIZE:whole])


class FrameDecoder:
    """Master frames from arbitrary chunks: ``feed`` bytes, then ``frames()`` returns every complete frame.

    Bodies are copied out (``bytes``), so frames stay valid after later feeds. A header is validated as soon as
    its 12 bytes arrive, so an oversize or negative body size is refused before the body is buffered. The buffer
    holds at most one partial frame plus the last chunk fed.
    """

    __slots__ = ("max_body", "_buf", "_pos")

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self._buf = bytearray()
        self._pos = 0

    @property
    def consumed(self) -> int:
        """Bytes consumed from the start of the buffer since the last compaction (used by ``decode_frame``)."""
        return self._pos

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes | memoryview) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def peek_header(self) -> tuple[int, int] | None:
        """The next header if its 12 bytes are here (validated), else None."""
        if len(self._buf) - self._pos < HEADER_SIZE:
            return None
        return decode_header(bytes(self._buf[self._pos:self._pos + HEADER_SIZE]), self.max_body)

    def frames(self) -> list[Frame | ErrorFrame | Challenge]:
        with memoryview(self._buf) as view:
            found, self._pos = parse_frames(view, self._pos, len(self._buf), self.max_body)
            # copy bodies out so the frames outlive the buffer (feed may move or resize it)
            return [Frame(f.phy_offset, bytes(f.body)) if isinstance(f, Frame) else f for f in found]


def parse_frames(view: memoryview, start: int, end: int,
                 max_body: int) -> tuple[list[Frame | ErrorFrame | Challenge], int]:
    """Every complete frame in ``view[start:end]``; returns (frames, position after the last one).

    Zero-copy: data-frame bodies are memoryview slices of ``view``, valid until the caller reuses that region.
    A header is validated as soon as its 12 bytes are present, even if its body is not.
    """
    out: list[Frame | ErrorFrame | Challenge] = []
    pos = start
    while end - pos >= HEADER_SIZE:
        phy_offset, size = decode_header(view[pos:pos + HEADER_SIZE], max_body)
        body_at = pos + HEADER_SIZE
        if size == CHALLENGE_MARKER:
            if end - body_at < CHALLENGE_BODY_SIZE:
                break
            out.append(decode_challenge(view[body_at:body_at + CHALLENGE_BODY_SIZE]))
            pos = body_at + CHALLENGE_BODY_SIZE
            continue
        if size == ERROR_MARKER:
            if end - body_at < ERROR_FIXED_SIZE:
                break
            code, mn, mx, mlen = _decode_error_fixed(phy_offset, view[body_at:body_at + ERROR_FIXED_SIZE])
            msg_at = body_at + ERROR_FIXED_SIZE
            if end - msg_at < mlen:
                break
            out.append(_make_error(phy_offset, code, mn, mx, view[msg_at:msg_at + mlen]))
            pos = msg_at + mlen
            continue
        if end - body_at < size:
            break
        out.append(Frame(phy_offset, view[body_at:body_at + size]))
        pos = body_at + size
    return out, pos


__all__ = [
    "ERROR_FIXED", "ERROR_FIXED_SIZE", "MAX_ERROR_MESSAGE_BYTES", "REPORT", "REPORT_SIZE", "ErrorCode", "ErrorFrame",
    "Frame", "FrameDecoder", "ReportDecoder", "decode_frame", "decode_header", "decode_report", "encode_error",
    "encode_frame", "encode_header", "encode_heartbeat", "encode_report", "parse_frames", "read_frame", "read_report",
    # the frame parsers return a Challenge and raise ProtocolError (their home: ha_handshake, ha_wire)
    "ProtocolError", "Challenge",
]
