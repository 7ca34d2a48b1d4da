"""What the HA handshake (``ha_handshake``) and the HA frame stream (``ha_codec``) share: the 12-byte header every
master -> slave structure opens with, the two markers that make a header a challenge or an error frame, the error
a malformed peer raises, and the exact read over a stream. Its own module so the two codecs depend on it and never
on each other. Pure: no sockets; task-safe (no shared state).

Every integer is big-endian two's complement (Java ``ByteBuffer``). Master -> slave **header**::

    0   8  phy_offset  i64, commitlog offset of body[0]; -1 for a challenge, -1 or the slave's offset for an error
    8   4  body_size   i32, >= 0: a data frame or heartbeat; ERROR_MARKER (-1): an error frame;
                       CHALLENGE_MARKER (-2): the master's challenge
"""

from __future__ import annotations

import asyncio
import struct
from typing import Protocol

from common.errors import PyrmqError

ERROR_MARKER = -1
CHALLENGE_MARKER = -2

HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size  # 12


class ProtocolError(PyrmqError):
    """The peer sent bytes that are not a valid HA structure; the connection must be closed, never resynced."""

    retriable = True

    def __init__(self, message: str, *, field: str = "", value: object = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint or "close the connection; the slave reconnects from its own max offset")
        self.field = field
        self.value = value


class Reader(Protocol):
    async def readexactly(self, n: int) -> bytes: ...


async def read_exactly(reader: Reader, n: int, what: str) -> bytes:
    """``n`` bytes of ``what``; a stream that ends first is a ProtocolError naming how much of it came."""
    if n == 0:
        return b""
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"{what} truncated: stream ended after {len(exc.partial)} of {n} bytes",
                            field=what, value=len(exc.partial)) from None
