"""The v2 port in ``tls.server.mode=permissive``: TLS and plaintext gRPC on one port.

gRPC core serves a port either with TLS or without, never both. So in permissive mode gRPC listens on two loopback
ports (one with TLS, one without) and this front owns ``grpcServerPort``: a ``GuardedListener`` sorts each
connection by its first byte (0x16: TLS) and splices it to the matching loopback port, copying bytes both ways
(gRPC does the TLS itself, with its own handshake deadline). Enforcing mode needs no front: gRPC's TLS port is
``grpcServerPort`` itself.

Bounds: the listener's (first byte within ``tls.server.handshakeTimeoutMillis``, ``MAX_PENDING`` connections
before their backend); each direction of a splice stops reading when the other side's write buffer passes
``HIGH_WATER`` (so a splice holds at most about twice that). What the splice costs: every byte crosses the event
loop once more, and gRPC sees each peer as 127.0.0.1 with the splice's own source port; ``real_peer`` maps that
back to the client's address (``service.peer_host`` asks it, so born hosts, and any check by source address,
see the client, not the front). Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
from collections.abc import Callable

from remoting.tls import TlsMode
from remoting.tls_listener import GuardedListener

log = logging.getLogger(__name__)

HIGH_WATER = 256 * 1024
BACKEND_HOST = "127.0.0.1"

# the splice's source port on 127.0.0.1 (what gRPC reports as the peer) -> the client's (host, port), while it lives
_REAL_PEERS: dict[int, tuple[str, int]] = {}


def real_peer(host: str, port: int) -> tuple[str, int]:
    """The client behind a spliced connection gRPC reports as ``host:port``; ``(host, port)`` for any other."""
    if host == BACKEND_HOST:
        return _REAL_PEERS.get(port, (host, port))
    return host, port


class _Half(asyncio.Protocol):
    """One side of a splice: what it reads goes to ``other``; backpressure flows the other way."""

    def __init__(self, forget: Callable[[_Half], None]) -> None:
        self.forget = forget
        self.transport: asyncio.Transport | None = None
        self.other: _Half | None = None
        self._early: list[bytes] = []  # bytes read before the other side was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=HIGH_WATER)  # type: ignore[attr-defined]

    def link(self, other: _Half) -> None:
        self.other = other
        for data in self._early:
            other.transport.write(data)  # type: ignore[union-attr]
        self._early.clear()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.other is None or self.other.transport is None:
            self._early.append(data)
            if sum(map(len, self._early)) > HIGH_WATER and self.transport is not None:
                self.transport.pause_reading()
            return
        self.other.transport.write(data)

    def eof_received(self) -> bool:
        """One side finished: close both (gRPC never half-closes; a peer that did would keep a half-open splice,
        which no timer ever ends). The other side's unwritten bytes still go out before it closes."""
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()
        return False

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.forget(self)
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()


class PermissiveFront:
    """Owns ``host:port``; splices TLS connections to ``tls_port`` and plaintext ones to ``plain_port``."""

    def __init__(self, host: str, port: int, *, tls_port: int, plain_port: int, context: ssl.SSLContext,
                 handshake_timeout_s: float, on_refused: Callable[[str], None] | None = None) -> None:
        """``on_refused(reason)``: a connection closed before its backend (the broker's remoting closes counter,
        so ``rocketmq_remoting_connections_closed_total`` counts the v2 port's refusals with the remoting ports')."""
        self.tls_port = tls_port
        self.plain_port = plain_port
        self.listener = GuardedListener("v2-tls-front", host, port, mode=TlsMode.PERMISSIVE, context=context,
                                        serve=self._splice, handshake_timeout_s=handshake_timeout_s,
                                        on_refused=on_refused)
        self._halves: set[_Half] = set()

    async def start(self) -> int:
        return await self.listener.start()

    async def _splice(self, sock: socket.socket, is_tls: bool, remaining_s: float) -> None:
        loop = asyncio.get_running_loop()
        _, front = await loop.connect_accepted_socket(lambda: _Half(self._halves.discard), sock)
        assert isinstance(front, _Half)
        self._halves.add(front)
        try:
            async with asyncio.timeout(remaining_s):
                _, back = await loop.create_connection(lambda: _Half(self._halves.discard), BACKEND_HOST,
                                                       self.tls_port if is_tls else self.plain_port)
        except (OSError, TimeoutError):
            front.transport.close()  # type: ignore[union-attr]
            raise
        assert isinstance(back, _Half)
        self._halves.add(back)
        local, client = back.transport.get_extra_info("sockname"), front.transport.get_extra_info("peername")
        if local and client:
            _REAL_PEERS[local[1]] = (client[0], client[1])
            back.forget = functools.partial(self._forget_splice, local[1])
        if front.transport is None or front.transport.is_closing():
            back.transport.close()  # type: ignore[union-attr]
            return
        # either side may have read before both existed (a plaintext HTTP/2 server speaks first: its SETTINGS)
        front.link(back)
        back.link(front)

    def _forget_splice(self, port: int, half: _Half) -> None:
        _REAL_PEERS.pop(port, None)
        self._halves.discard(half)

    def close(self) -> None:
        self.listener.close()
        for half in list(self._halves):
            if half.transport is not None:
                half.transport.close()
        self._halves.clear()
