"""The slave's bounded, zero-copy HA receive buffer (an ``asyncio.BufferedProtocol``).

Why a module of its own: the buffer's bookkeeping (where unparsed bytes start and end, when to move a partial
frame's tail to the front, when to pause and resume the transport) is the one piece of the slave whose memory
bound matters, and it does not depend on the handshake, the reports or the store. ``slave.py`` owns the
connection; this module owns the bytes, so the bound (``size`` bytes, never more, whatever the master sends) can
be read and checked on its own.
"""

from __future__ import annotations

import asyncio

from remoting.ha_codec import ERROR_FIXED_SIZE, MAX_ERROR_MESSAGE_BYTES
from remoting.ha_wire import HEADER_SIZE


class ReceiveBuffer(asyncio.BufferedProtocol):
    """Zero-copy receive side: the kernel writes into ``buf`` (recv_into), the reader parses and appends in place.

    ``buf[start:end]`` holds unparsed bytes. The reader moves the tail of a partial frame to the front when less
    than one whole frame fits after ``end``; reading pauses when the free space drops below one frame and resumes
    once the reader made room, so memory stays bounded at ``size`` bytes.
    """

    def __init__(self, size: int, max_body: int) -> None:
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.start = 0
        self.end = 0
        self.room = HEADER_SIZE + max(max_body, ERROR_FIXED_SIZE + MAX_ERROR_MESSAGE_BYTES)
        self.ready = asyncio.Event()
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.eof = False
        self.lost: BaseException | None = None
        self.received = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        self.received += nbytes
        self.ready.set()
        if len(self.buf) - self.end < self.room and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        self.ready.set()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self.lost = exc
        self.ready.set()

    def consumed(self, pos: int) -> None:
        """The reader parsed up to ``pos``: reuse the space and resume reading when there is room again."""
        self.start = pos
        if self.start == self.end:
            self.start = self.end = 0
        elif len(self.buf) - self.end < self.room:
            tail = bytes(self.view[self.start:self.end])  # < one frame; copied first: the regions may overlap
            n = len(tail)
            self.buf[:n] = tail  # same-size slice assignment: no resize, so outstanding views stay valid
            self.start, self.end = 0, n
        if self.paused and len(self.buf) - self.end >= self.room and not self.eof:
            self.paused = False
            self.transport.resume_reading()
