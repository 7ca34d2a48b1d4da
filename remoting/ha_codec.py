"""HA stream codec: RocketMQ's replication frames plus pyrmq's hello and error frames. Pure: no sockets.

Every integer is big-endian two's complement (Java ``ByteBuffer``). The stream between a slave and its master:

Slave -> master, once, first bytes of the connection: **hello** (pyrmq; DESIGN.md §3)::

    offset  size  field
    0       4     magic        b"PRHA" (0x50 0x52 0x48 0x41)
    4       2     version      u16, HELLO_VERSION = 2
    6       2     flags        u16, bit 0 = ADDR: broker_addr follows the names; other bits reserved (refused)
    8       8     broker_id    i64, the slave's brokerId (>= 1 for a slave)
    16      16    nonce        the slave's random challenge to the master (fresh per connection)
    32      1     cluster_len  u8  (1..MAX_NAME_BYTES)
    33      1     name_len     u8  (1..MAX_NAME_BYTES)
    34      c     cluster      utf-8, brokerClusterName
    34+c    n     broker_name  utf-8, brokerName
    34+c+n  1     addr_len     u8  (1..MAX_NAME_BYTES), only with ADDR
    35+c+n  a     broker_addr  ASCII host:port, only with ADDR: the slave's broker address as it registers
                               (brokerIP1:listenPort), so ``haStatus`` names the slave, not its HA socket's peer

ADDR is optional both ways: a hello without it decodes as it always did (``broker_addr`` ""), so a master reads
slaves that do not send it. A master older than ADDR refuses the flag, so masters are upgraded before slaves.
The address is the slave's claim; with a secret the proofs cover it like every other field of the hello.

Master -> slave, once, right after a hello it accepts: **challenge** (pyrmq), a frame with the CHALLENGE_MARKER
size::

    0   8   phy_offset   i64 = -1
    8   4   body_size    i32 = CHALLENGE_MARKER (-2)
    12  2   flags        u16, bit 0 = AUTH: the master authenticates its slaves (proof valid, a proof is due)
    14  32  nonce        the master's random challenge (fresh per connection)
    46  32  proof        AUTH: HMAC-SHA256(haAuthSecret, MASTER_LABEL + hello + nonce); else 32 zero bytes

Slave -> master, once, right after an AUTH challenge: **proof** = HMAC-SHA256(haAuthSecret, SLAVE_LABEL + hello +
challenge nonce), 32 bytes. ``hello`` is the hello's exact bytes, so both proofs cover both nonces and every field
the slave claims: a captured exchange proves nothing on another connection (nothing to replay, no clock involved),
and the two labels keep one side's proof from being reflected as the other's. The slave checks the master's proof
before it sends its own, so a peer posing as the master learns no proof either. Without AUTH (a master run with
``haUnsafeAllowUnauthenticatedSlaves``) no proof is sent.

Slave -> master, afterwards: **report** = ``i64 slaveMaxPhyOffset`` (8 bytes, nothing else). The same word
is the start request (first one), the ack and the heartbeat (RocketMQ §3.2). Only the newest complete word
of a read counts.

Master -> slave: **frame header** (12 bytes) + body::

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

Any other negative ``body_size`` or one above the receiver's ``haTransferBatchSize`` is a ProtocolError; so is a
truncated structure. Parsers come in two shapes: ``read_*`` coroutines over a ``Reader`` (anything with
``readexactly``, e.g. ``asyncio.StreamReader``), and ``decode_*`` / ``parse_frames`` (zero-copy, over a caller's
buffer) / ``FrameDecoder`` / ``ReportDecoder`` over bytes, for callers that read large chunks and want one ack
per read batch. All of it is task-safe because it
holds no shared state; decoders are per connection.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Protocol

from common.errors import PyrmqError
from remoting.headers import parse_host_port

MAGIC = b"PRHA"
HELLO_VERSION = 2
MAX_NAME_BYTES = 255
NONCE_BYTES = 16  # slave nonce, in the hello
CHALLENGE_NONCE_BYTES = 32  # master nonce, in the challenge
PROOF_BYTES = 32  # HMAC-SHA256
ERROR_MARKER = -1
CHALLENGE_MARKER = -2
CHALLENGE_AUTH = 0x1
HELLO_ADDR = 0x1  # hello flag: the slave's broker address follows the names
MAX_ERROR_MESSAGE_BYTES = 4096
MASTER_LABEL = b"pyrmq-ha-2 master proof\x00"
SLAVE_LABEL = b"pyrmq-ha-2 slave proof\x00"

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HELLO_FIXED = struct.Struct(">4sHHq16sBB")
ERROR_FIXED = struct.Struct(">HqqH")
CHALLENGE_FIXED = struct.Struct(">H32s32s")

REPORT_SIZE = REPORT.size  # 8
HEADER_SIZE = HEADER.size  # 12
HELLO_FIXED_SIZE = HELLO_FIXED.size  # 34
ERROR_FIXED_SIZE = ERROR_FIXED.size  # 20
CHALLENGE_BODY_SIZE = CHALLENGE_FIXED.size  # 66
CHALLENGE_SIZE = HEADER_SIZE + CHALLENGE_BODY_SIZE  # 78


class ProtocolError(PyrmqError):
    """The peer sent bytes that are not a valid HA structure; the connection must be closed, never resynced."""

    retriable = True

    def __init__(self, message: str, *, field: str = "", value: object = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint or "close the connection; the slave reconnects from its own max offset")
        self.field = field
        self.value = value


class ErrorCode(enum.IntEnum):
    """Why a master refuses to (go on) serving a slave. Carried in the error frame."""

    SLAVE_BEHIND_MASTER_MIN = 1  # slave's offset < master's min: the bytes it needs were deleted
    SLAVE_AHEAD_OF_MASTER_MAX = 2  # slave has bytes the master never had (e.g. after a manual failover)
    PEER_REFUSED = 3  # handshake failed: wrong magic/version, cluster, brokerName, brokerId or proof
    REPLACED = 4  # a newer connection with the same brokerId took over
    PROTOCOL_ERROR = 5  # the slave sent something invalid (decreasing ack, ack beyond what was sent)
    SHUTTING_DOWN = 6  # the master is stopping


class Reader(Protocol):
    async def readexactly(self, n: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Hello:
    broker_id: int
    cluster: str
    broker_name: str
    nonce: bytes
    raw: bytes = b""  # the hello's exact bytes, which both proofs cover (filled by the decoder)
    broker_addr: str = ""  # the slave's brokerIP1:listenPort (ADDR); "" from a slave that did not send it


@dataclass(frozen=True, slots=True)
class Challenge:
    """The master's answer to an accepted hello; ``auth`` False: the master authenticates nobody (unsafe mode)."""

    auth: bool
    nonce: bytes
    proof: bytes


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


def encode_hello(*, broker_id: int, cluster: str, broker_name: str, nonce: bytes, broker_addr: str = "") -> bytes:
    """``broker_addr`` "" sends no ADDR (the hello of a slave that does not say where it serves)."""
    c = cluster.encode("utf-8")
    n = broker_name.encode("utf-8")
    for label, raw in (("cluster", c), ("broker_name", n)):
        if not 1 <= len(raw) <= MAX_NAME_BYTES:
            raise ValueError(f"hello {label} must be 1..{MAX_NAME_BYTES} utf-8 bytes, got {len(raw)}")
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"hello nonce must be {NONCE_BYTES} bytes, got {len(nonce)}")
    tail = b""
    if broker_addr:
        _check_broker_addr(broker_addr, ValueError)
        a = broker_addr.encode("ascii")
        tail = bytes([len(a)]) + a
    flags = HELLO_ADDR if tail else 0
    return HELLO_FIXED.pack(MAGIC, HELLO_VERSION, flags, broker_id, nonce, len(c), len(n)) + c + n + tail


def _check_broker_addr(addr: str, error: type[Exception]) -> None:
    """ASCII ``host:port`` of at most MAX_NAME_BYTES; ``error`` is raised otherwise (ValueError for a caller,
    ProtocolError for a peer)."""
    if not addr.isascii() or not 1 <= len(addr) <= MAX_NAME_BYTES or not addr.isprintable() or " " in addr:
        raise error(f"hello broker_addr {addr[:80]!r} must be 1..{MAX_NAME_BYTES} printable ASCII characters")
    try:
        parse_host_port(addr, "hello broker_addr")
    except ValueError as exc:
        raise error(str(exc)) from None


def master_proof(secret: bytes, hello: bytes, nonce: bytes) -> bytes:
    """What the master sends in an AUTH challenge: it holds the secret, for this hello and this nonce."""
    return hmac.new(secret, MASTER_LABEL + hello + nonce, hashlib.sha256).digest()


def slave_proof(secret: bytes, hello: bytes, nonce: bytes) -> bytes:
    """What the slave answers an AUTH challenge with (SLAVE_LABEL: never equal to a master proof)."""
    return hmac.new(secret, SLAVE_LABEL + hello + nonce, hashlib.sha256).digest()


def encode_challenge(nonce: bytes, proof: bytes | None) -> bytes:
    """``proof`` None: an unauthenticated master (no AUTH flag, zero proof)."""
    if len(nonce) != CHALLENGE_NONCE_BYTES:
        raise ValueError(f"challenge nonce must be {CHALLENGE_NONCE_BYTES} bytes, got {len(nonce)}")
    if proof is not None and len(proof) != PROOF_BYTES:
        raise ValueError(f"challenge proof must be {PROOF_BYTES} bytes, got {len(proof)}")
    flags = CHALLENGE_AUTH if proof is not None else 0
    return HEADER.pack(-1, CHALLENGE_MARKER) + CHALLENGE_FIXED.pack(flags, nonce, proof or bytes(PROOF_BYTES))


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


def _make_challenge(data: bytes | memoryview) -> Challenge:
    flags, nonce, proof = CHALLENGE_FIXED.unpack(data)
    if flags & ~CHALLENGE_AUTH:
        raise ProtocolError(f"challenge has unknown flags 0x{flags:04x}", field="flags", value=flags)
    return Challenge(bool(flags & CHALLENGE_AUTH), bytes(nonce), bytes(proof))


def _check_hello_fixed(data: bytes | memoryview) -> tuple[int, bytes, int, int, bool]:
    """(broker_id, nonce, cluster_len, name_len, has_addr) of a valid fixed part."""
    magic, version, flags, broker_id, nonce, clen, nlen = HELLO_FIXED.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"HA hello magic {bytes(magic)!r} is not {MAGIC!r}", field="magic", value=bytes(magic),
                            hint="the peer is not a pyrmq slave (a RocketMQ 4.x slave or a stray client?)")
    if version != HELLO_VERSION:
        raise ProtocolError(f"HA hello version {version} is not supported (this build speaks {HELLO_VERSION})",
                            field="version", value=version, hint="run the same pyrmq version on master and slave")
    if flags & ~HELLO_ADDR:
        raise ProtocolError(f"HA hello has unknown flags 0x{flags:04x}", field="flags", value=flags)
    if clen == 0 or nlen == 0:
        raise ProtocolError("HA hello has an empty cluster or brokerName", field="names")
    return broker_id, bytes(nonce), clen, nlen, bool(flags & HELLO_ADDR)


def _check_addr_len(alen: int) -> None:
    if alen == 0:
        raise ProtocolError("HA hello has the ADDR flag and an empty broker_addr", field="broker_addr", value=0)


def _make_hello(broker_id: int, nonce: bytes, names: bytes, clen: int, raw: bytes, addr: bytes = b"") -> Hello:
    try:
        cluster = names[:clen].decode("utf-8")
        name = names[clen:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"HA hello names are not utf-8: {exc}", field="names") from None
    broker_addr = ""
    if addr:
        broker_addr = addr.decode("latin-1")
        _check_broker_addr(broker_addr, ProtocolError)
    return Hello(broker_id, cluster, name, nonce, raw, broker_addr)


def decode_hello(data: bytes | memoryview) -> tuple[Hello, int]:
    """Parse a hello at the start of ``data``; returns (hello, bytes consumed). Truncated -> ProtocolError."""
    if len(data) < HELLO_FIXED_SIZE:
        raise ProtocolError(f"HA hello truncated: {len(data)} of {HELLO_FIXED_SIZE} fixed bytes", field="hello")
    broker_id, nonce, clen, nlen, has_addr = _check_hello_fixed(data[:HELLO_FIXED_SIZE])
    names_end = total = HELLO_FIXED_SIZE + clen + nlen
    if has_addr:
        if len(data) <= names_end:
            raise ProtocolError(f"HA hello truncated: {len(data)} of {names_end + 1} bytes", field="hello")
        _check_addr_len(data[names_end])
        total = names_end + 1 + data[names_end]
    if len(data) < total:
        raise ProtocolError(f"HA hello truncated: {len(data)} of {total} bytes", field="hello")
    raw = bytes(data[:total])
    return _make_hello(broker_id, nonce, raw[HELLO_FIXED_SIZE:names_end], clen, raw, raw[names_end + 1:total]), total


def decode_frame(data: bytes | memoryview, max_body: int) -> tuple[Frame | ErrorFrame | Challenge, int]:
    """Parse one whole frame at the start of ``data``; returns (frame, bytes consumed). Truncated -> ProtocolError."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"frame header truncated: {len(data)} of {HEADER_SIZE} bytes", field="header")
    phy_offset, size = decode_header(data[:HEADER_SIZE], max_body)
    if size == CHALLENGE_MARKER:
        if len(data) < CHALLENGE_SIZE:
            raise ProtocolError(f"challenge truncated: {len(data)} of {CHALLENGE_SIZE} bytes", field="challenge")
        return _make_challenge(data[HEADER_SIZE:CHALLENGE_SIZE]), CHALLENGE_SIZE
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
    return decode_report(await _readexactly(reader, REPORT_SIZE, "report"))


async def read_hello(reader: Reader) -> Hello:
    fixed = await _readexactly(reader, HELLO_FIXED_SIZE, "hello")
    broker_id, nonce, clen, nlen, has_addr = _check_hello_fixed(fixed)
    names = await _readexactly(reader, clen + nlen, "hello names")
    if not has_addr:
        return _make_hello(broker_id, nonce, names, clen, fixed + names)
    alen = await _readexactly(reader, 1, "hello addr_len")
    _check_addr_len(alen[0])
    addr = await _readexactly(reader, alen[0], "hello broker_addr")
    return _make_hello(broker_id, nonce, names, clen, fixed + names + alen + addr, addr)


async def read_proof(reader: Reader) -> bytes:
    return await _readexactly(reader, PROOF_BYTES, "proof")


async def read_frame(reader: Reader, max_body: int) -> Frame | ErrorFrame | Challenge:
    phy_offset, size = decode_header(await _readexactly(reader, HEADER_SIZE, "frame header"), max_body)
    if size == CHALLENGE_MARKER:
        return _make_challenge(await _readexactly(reader, CHALLENGE_BODY_SIZE, "challenge"))
    if size == ERROR_MARKER:
        code, mn, mx, mlen = _decode_error_fixed(phy_offset, await _readexactly(reader, ERROR_FIXED_SIZE, "error"))
        return _make_error(phy_offset, code, mn, mx, await _readexactly(reader, mlen, "error message"))
    return Frame(phy_offset, await _readexactly(reader, size, "frame body") if size else b"")


async def _readexactly(reader: Reader, n: int, what: str) -> bytes:
    if n == 0:
        return b""
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"{what} truncated: stream ended after {len(exc.partial)} of {n} bytes",
                            field=what, value=len(exc.partial)) from None


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
            out.append(_make_challenge(view[body_at:body_at + CHALLENGE_BODY_SIZE]))
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
