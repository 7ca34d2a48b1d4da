"""Hosts and message ids (spec remoting.md §6.5): the 8-byte IPv4 host fields of a record, the offset msgId that
locates a record in its broker's commitlog, and UNIQ_KEY, the id a producer gives a message.

The offset msgId is upper-case hex of store IPv4 (4) + port (i32) + commitlog offset (i64), 32 characters.
UNIQ_KEY is 32 upper-case hex characters: 20 fixed per process (IPv4 address, pid & 0xFFFF, 4 random bytes), 8 of
milliseconds since the generator's epoch (mod 2**32), 4 of a counter (mod 2**16); two ids of one generator differ
unless 65,536 are made within one millisecond. The caller owns the clock and the randomness.
"""

from __future__ import annotations

import itertools
import socket
import struct

from remoting.message_codec.errors import MessageCodecError

_HOST = struct.Struct(">4si")
_OFFSET_ID = struct.Struct(">4siq")


def host_bytes(ip: str, port: int) -> bytes:
    """8 bytes: IPv4 address + i32 port. Non-IPv4 text (host names) encodes as 0.0.0.0."""
    try:
        addr = socket.inet_aton(ip) if ip.count(".") == 3 else b"\0\0\0\0"
    except OSError:
        addr = b"\0\0\0\0"
    return _HOST.pack(addr, port)


def parse_host(data: bytes) -> tuple[str, int]:
    addr, port = _HOST.unpack_from(data)
    return socket.inet_ntoa(addr), port


def offset_msg_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """RocketMQ's offsetMsgId: hex of store IPv4 (4 bytes) + port (4 bytes) + physical offset (8 bytes)."""
    ip, port = store_host
    parts = [int(p) for p in ip.split(".")] if ip.count(".") == 3 else [0, 0, 0, 0]
    return bytes(parts).hex().upper() + f"{port:08X}{physical_offset:016X}"


def parse_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """``((store_ip, port), physical_offset)`` of a 32-character offset msgId; MessageCodecError otherwise."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(msg_id) != 32 or len(raw) != 16:
        raise MessageCodecError(f"offset msgId {msg_id[:64]!r} is not 32 hex characters (IPv4 store host)")
    addr, port, offset = _OFFSET_ID.unpack(raw)
    return (socket.inet_ntoa(addr), port), offset


def uniq_id_prefix(ipv4: str, pid: int, nonce: bytes) -> str:
    """The 20 fixed characters of a process's UNIQ_KEYs: IPv4 address, pid & 0xFFFF, 4 nonce bytes."""
    if len(nonce) != 4:
        raise ValueError(f"the UNIQ_KEY nonce is 4 bytes, got {len(nonce)}")
    try:
        addr = socket.inet_aton(ipv4) if ipv4.count(".") == 3 else b"\x7f\0\0\1"
    except OSError:
        addr = b"\x7f\0\0\1"
    return (addr + (pid & 0xFFFF).to_bytes(2, "big") + nonce).hex().upper()


class UniqIdGenerator:
    """UNIQ_KEYs of one process: ``prefix`` (from ``uniq_id_prefix``), then ms since ``epoch_ms``, then a counter.

    The caller owns the clock (``next_id(now_ms)``) and builds one generator per process."""

    __slots__ = ("_head", "_last_ms", "counter", "epoch_ms", "prefix")

    def __init__(self, prefix: str, epoch_ms: int) -> None:
        if len(prefix) != 20:
            raise ValueError(f"a UNIQ_KEY prefix is 20 hex characters, got {prefix!r}")
        self.prefix = prefix
        self.epoch_ms = epoch_ms
        self.counter = itertools.count()
        self._last_ms = -1
        self._head = ""

    def next_id(self, now_ms: int) -> str:
        if now_ms != self._last_ms:  # the first 28 characters change once per millisecond
            self._last_ms = now_ms
            self._head = f"{self.prefix}{(now_ms - self.epoch_ms) & 0xFFFFFFFF:08X}"
        return f"{self._head}{next(self.counter) & 0xFFFF:04X}"
