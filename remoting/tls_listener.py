"""GuardedListener: a listening socket whose connections must say TLS or plaintext before they reach a protocol.

asyncio's ``create_server(ssl=...)`` serves TLS only; RocketMQ's permissive mode serves both on one port, choosing
by the first byte (0x16 opens a TLS handshake record). So this listener accepts itself, waits for the first byte
(``MSG_PEEK``: nothing is consumed), then hands the socket to the event loop's own transport:
``connect_accepted_socket`` with the TLS context (the handshake runs in the loop's C code under uvloop) or without.

Bounds: from accept to a finished handshake a connection has ``handshake_timeout_s`` (a peer that sends nothing,
or stops halfway through its handshake, is closed then); at most ``max_pending`` connections are between accept and
their protocol at once, and at most ``max_pending_per_host`` from one source address. When all are taken, the
oldest connection that has not sent a byte for ``EVICT_SILENT_AFTER_S`` gives its place to the newcomer, else the
newcomer is closed at once: silent sockets hold at most that many descriptors and a few KiB each, and a flood of
them from one address, or of silent ones from many, does not keep real clients out (the HA port's handshake slots
follow the same rule). On an enforcing port a plaintext first byte is closed with a log line saying the
port wants TLS; a failed handshake (a client certificate from another CA, an expired one, none when one is
required) is closed with one naming the reason. Every such line is rate-limited (a peer repeats them at will) and
every close is counted by reason through ``on_refused`` (the process's ``HeldBytes.closed``, so the metrics
``rocketmq_remoting_connections_closed_total`` count them with the other bounds).

``serve(sock, is_tls)`` decides what a sorted connection becomes; ``terminate`` (the default) makes it the
protocol of ``protocol_factory`` over the loop's (TLS) transport. Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from common.log import RateLimitedLog
from remoting.tls import TLS_RECORD_HANDSHAKE, TlsMode

log = logging.getLogger(__name__)

MAX_PENDING = 256  # connections between accept and their protocol (first byte or handshake outstanding)
MAX_PENDING_PER_HOST = 32  # of those, from one source address (a client process opens a few at once)
EVICT_SILENT_AFTER_S = 0.25  # a pending connection silent this long gives its place to a newcomer

# why a connection was closed before it reached its protocol (label values of the closes counter)
HANDSHAKE_TIMEOUT = "tls_handshake_timeout"
HANDSHAKE_FAILED = "tls_handshake_failed"
PLAINTEXT_REFUSED = "plaintext_on_tls_port"
PENDING_FULL = "tls_pending_full"
REASONS = (HANDSHAKE_TIMEOUT, HANDSHAKE_FAILED, PLAINTEXT_REFUSED, PENDING_FULL)

plaintext_log = RateLimitedLog(log)
handshake_failed_log = RateLimitedLog(log)  # each kind limited on its own: a flood of one hides no other
handshake_timeout_log = RateLimitedLog(log)
pending_log = RateLimitedLog(log)


class GuardedListener:
    """Listens on ``host:port`` in ``mode`` (permissive or enforcing); ``start()`` returns the bound port."""

    def __init__(self, name: str, host: str, port: int, *, mode: TlsMode, context: ssl.SSLContext,
                 protocol_factory: Callable[[], asyncio.BaseProtocol] | None = None,
                 serve: Callable[[socket.socket, bool, float], Awaitable[None]] | None = None,
                 handshake_timeout_s: float = 5.0, max_pending: int = MAX_PENDING,
                 max_pending_per_host: int = MAX_PENDING_PER_HOST,
                 on_refused: Callable[[str], None] | None = None) -> None:
        if mode is TlsMode.DISABLED:
            raise ValueError("a disabled port needs no GuardedListener: serve it with create_server")
        if (protocol_factory is None) == (serve is None):
            raise ValueError("give protocol_factory (terminate TLS here) or serve (hand the socket on), not both")
        self.name = name
        self.host = host
        self.port = port
        self.mode = mode
        self.context = context
        self.protocol_factory = protocol_factory
        self._serve = serve or self._terminate
        self.handshake_timeout_s = handshake_timeout_s
        self.max_pending = max_pending
        self.max_pending_per_host = max_pending_per_host
        self.on_refused = on_refused
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._pending: dict[asyncio.Task, _Pending] = {}

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def sockets(self) -> list[socket.socket]:
        return [self._sock] if self._sock is not None else []

    async def start(self) -> int:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            sock = socket.create_server((self.host, self.port), family=family, backlog=1024, reuse_port=False)
        except OSError as exc:
            raise OSError(exc.errno, f"{self.name} cannot listen on {self.host}:{self.port} "
                                     f"({exc.strerror or exc}); choose another port or stop the process that "
                                     "holds it") from None
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop(), name=f"{self.name}-accept")
        return self.port

    def close(self) -> None:
        """Stop accepting and drop the connections not yet handed on (those handed on are their owner's)."""
        if self._accept_task is not None:
            self._accept_task.cancel()
            self._accept_task = None
        for task in list(self._pending):
            task.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def wait_closed(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    # accept ------------------------------------------------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            try:
                conn, addr = await loop.sock_accept(self._sock)
            except OSError as exc:  # EMFILE and the like: say so, wait a little, go on
                pending_log.warning("%s: accept failed (%s); retrying", self.name, exc.strerror or exc)
                await asyncio.sleep(0.1)
                continue
            host = addr[0] if isinstance(addr, tuple) else str(addr)
            if not self._make_room(host):
                self._refuse(PENDING_FULL)
                pending_log.warning("%s: closed %s at once: %d connections (%d from its address) are still in their "
                                    "TLS handshake or have not sent a byte, none of them silent for long enough to "
                                    "give way", self.name, _fmt(addr), len(self._pending),
                                    self._from_host(host))
                conn.close()
                continue
            conn.setblocking(False)
            entry = _Pending(host, time.monotonic())
            task = loop.create_task(self._sort(conn, _fmt(addr), entry))
            self._pending[task] = entry
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task) -> None:
        self._pending.pop(task, None)

    def _from_host(self, host: str) -> int:
        return sum(1 for p in self._pending.values() if p.host == host)

    def _make_room(self, host: str) -> bool:
        """Whether a newcomer from ``host`` may be sorted, closing the oldest silent pending connection (of that
        host when its own cap is what is full) to make room."""
        host_full = self._from_host(host) >= self.max_pending_per_host
        if not host_full and len(self._pending) < self.max_pending:
            return True
        now = time.monotonic()
        silent = [(p.started, task) for task, p in self._pending.items()
                  if not p.spoke and now - p.started >= EVICT_SILENT_AFTER_S and (not host_full or p.host == host)]
        if not silent:
            return False
        _, victim = min(silent, key=lambda item: item[0])
        self._refuse(HANDSHAKE_TIMEOUT)
        pending_log.warning("%s: a connection from %s sent nothing for %.2f s; closed to make room for a newcomer "
                            "(silent connections cannot hold a TLS port's places)", self.name,
                            self._pending[victim].host, now - self._pending[victim].started)
        victim.cancel()
        del self._pending[victim]
        return True

    async def _sort(self, conn: socket.socket, peer: str, entry: _Pending) -> None:
        handed = False
        deadline = time.monotonic() + self.handshake_timeout_s
        try:
            async with asyncio.timeout(self.handshake_timeout_s):
                first = await _peek(conn)
            if not first:
                return  # closed before a byte: nothing to say
            entry.spoke = True
            is_tls = first[0] == TLS_RECORD_HANDSHAKE
            if not is_tls and self.mode is TlsMode.ENFORCING:
                self._refuse(PLAINTEXT_REFUSED)
                plaintext_log.warning(
                    "%s: closing the connection from %s: it sent plaintext (first byte 0x%02x) to a port with "
                    "tls.server.mode=enforcing; connect with TLS (tls.enable=true, the SDK's tls=True, mqctl --tls)",
                    self.name, peer, first[0])
                return
            handed = True
            await self._serve(conn, is_tls, max(0.01, deadline - time.monotonic()))
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self._refuse(HANDSHAKE_TIMEOUT)
            handshake_timeout_log.warning("%s: closing the connection from %s: no first byte or no finished TLS handshake "
                                  "within %.1f s (tls.server.handshakeTimeoutMillis)", self.name, peer,
                                  self.handshake_timeout_s)
        except ssl.SSLError as exc:
            self._refuse(HANDSHAKE_FAILED)
            handshake_failed_log.warning("%s: TLS handshake with %s failed: %s (a client certificate from another CA, "
                                  "none where tls.server.need.client.auth=true, or a client that does not trust "
                                  "this server's certificate)", self.name, peer, exc.reason or exc)
        except (OSError, EOFError) as exc:
            # uvloop and asyncio report an overdue handshake as ConnectionAbortedError, not TimeoutError
            timed_out = "longer than" in str(exc) or time.monotonic() >= deadline
            self._refuse(HANDSHAKE_TIMEOUT if timed_out else HANDSHAKE_FAILED)
            (handshake_timeout_log if timed_out else handshake_failed_log).warning("%s: closing the connection from %s before its protocol: %s", self.name, peer,
                                  "no finished TLS handshake within the deadline (tls.server.handshakeTimeoutMillis)"
                                  if timed_out else (getattr(exc, "strerror", None) or exc))
        finally:
            if not handed:  # once handed to the loop, its transport closes the socket, on failure too
                with contextlib.suppress(OSError):
                    conn.close()

    async def _terminate(self, conn: socket.socket, is_tls: bool, remaining_s: float) -> None:
        loop = asyncio.get_running_loop()
        assert self.protocol_factory is not None
        if is_tls:
            await loop.connect_accepted_socket(self.protocol_factory, conn, ssl=self.context,
                                               ssl_handshake_timeout=remaining_s)
        else:
            await loop.connect_accepted_socket(self.protocol_factory, conn)

    def _refuse(self, reason: str) -> None:
        self.refused[reason] += 1
        if self.on_refused is not None:
            self.on_refused(reason)


async def _peek(conn: socket.socket) -> bytes:
    """The first byte the peer sent, left in the socket (b"" when it closed first)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            return conn.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            pass
        ready = loop.create_future()
        fd = conn.fileno()
        loop.add_reader(fd, _set_once, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


@dataclass
class _Pending:
    host: str
    started: float
    spoke: bool = False  # its first byte arrived (it is in its handshake now, no longer a candidate for eviction)


def _set_once(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _fmt(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def tls_protocol_name(transport: asyncio.BaseTransport) -> str | None:
    """The TLS version of a connection's transport ("TLSv1.3"), None for plain TCP."""
    obj = transport.get_extra_info("ssl_object")
    return obj.version() if obj is not None else None
