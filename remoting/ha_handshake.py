"""HA handshake codec: the hello, the challenge and the proofs that open every connection between a slave and its
master (pyrmq; DESIGN.md §3), before any replication frame (``ha_codec``) flows. Its own module because it is the
authentication half of the HA stream: who the slave says it is, and how each side proves it holds ``haAuthSecret``.
Pure: no sockets; task-safe (no shared state).

Every integer is big-endian two's complement (Java ``ByteBuffer``).

Slave -> master, once, first bytes of the connection: **hello**::

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

Master -> slave, once, right after a hello it accepts: **challenge**, a frame whose header (``ha_wire``) carries
the CHALLENGE_MARKER size::

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

A truncated or invalid structure is a ProtocolError. The slave reads the challenge with the frame parsers of
``ha_codec`` (it arrives in the frame stream); ``decode_challenge`` is the body decoder they share.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

from remoting.ha_wire import CHALLENGE_MARKER, HEADER, HEADER_SIZE, ProtocolError, Reader, read_exactly
from remoting.headers import parse_host_port

MAGIC = b"PRHA"
HELLO_VERSION = 2
MAX_NAME_BYTES = 255
NONCE_BYTES = 16  # slave nonce, in the hello
CHALLENGE_NONCE_BYTES = 32  # master nonce, in the challenge
PROOF_BYTES = 32  # HMAC-SHA256
CHALLENGE_AUTH = 0x1
HELLO_ADDR = 0x1  # hello flag: the slave's broker address follows the names
MASTER_LABEL = b"pyrmq-ha-2 master proof\x00"
SLAVE_LABEL = b"pyrmq-ha-2 slave proof\x00"

HELLO_FIXED = struct.Struct(">4sHHq16sBB")
CHALLENGE_FIXED = struct.Struct(">H32s32s")

HELLO_FIXED_SIZE = HELLO_FIXED.size  # 34
CHALLENGE_BODY_SIZE = CHALLENGE_FIXED.size  # 66
CHALLENGE_SIZE = HEADER_SIZE + CHALLENGE_BODY_SIZE  # 78


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


# ---------------------------------------------------------------------------------------------------- encode
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
def decode_challenge(data: bytes | memoryview) -> Challenge:
    """The challenge body (the CHALLENGE_BODY_SIZE bytes after its header)."""
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


async def read_hello(reader: Reader) -> Hello:
    fixed = await read_exactly(reader, HELLO_FIXED_SIZE, "hello")
    broker_id, nonce, clen, nlen, has_addr = _check_hello_fixed(fixed)
    names = await read_exactly(reader, clen + nlen, "hello names")
    if not has_addr:
        return _make_hello(broker_id, nonce, names, clen, fixed + names)
    alen = await read_exactly(reader, 1, "hello addr_len")
    _check_addr_len(alen[0])
    addr = await read_exactly(reader, alen[0], "hello broker_addr")
    return _make_hello(broker_id, nonce, names, clen, fixed + names + alen + addr, addr)


async def read_proof(reader: Reader) -> bytes:
    return await read_exactly(reader, PROOF_BYTES, "proof")
