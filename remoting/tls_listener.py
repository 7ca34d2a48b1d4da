"""GuardedListener: a listening socket whose connections must say TLS or plaintext before they reach a protocol.

asyncio's ``create_server(ssl=...)`` serves TLS only; RocketMQ's permissive mode serves both on one port, choosing
by the first byte (0x16 opens a TLS handshake record). So this listener accepts itself, waits for the first byte
(``MSG_PEEK``: nothing is consumed), then hands the socket to the event loop's own transport:
``connect_accepted_socket`` with the TLS context (the handshake runs in the loop's C code under uvloop) or without.

Bounds: from accept to a finished handshake a connection has ``handshake_timeout_s`` (a peer that sends nothing,
or stops halfway through its handshake, is closed then); at most ``max_pending`` connections are between accept and
their protocol at once, and at most ``max_pending_per_host`` from one source address. When all are taken, the
oldest connection that has not sent a byte gives its place to the newcomer (``common.silent_slots``, the rule of
the HA port's handshake slots too), else the newcomer is closed at once: silent sockets hold at most that many
descriptors and a few KiB each, and a flood of them from one address, or from many, does not keep real clients out. On an enforcing port a plaintext first byte is closed with a log line saying the
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

from common.log import RateLimitedLog
from common.silent_slots import Place, SilentSlots
from remoting.tls import TLS_RECORD_HANDSHAKE, TlsMode

log = logging.getLogger(__name__)

MAX_PENDING = 256  # connections between accept and their protocol (first byte or handshake outstanding)
MAX_PENDING_PER_HOST = 32  # of those, from one source address (a client process opens a few at once)

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
        self.places = SilentSlots(total=max_pending, per_host=max_pending_per_host)
        self.on_refused = on_refused
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._pending: dict[Place, asyncio.Task] = {}

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
        for task in list(self._pending.values()):
            task.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def wait_closed(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending.values(), return_exceptions=True)

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
            now = time.monotonic()
            _, place, victim = self.places.claim(host, now)
            if place is None:
                self._refuse(PENDING_FULL)
                pending_log.warning("%s: closed %s at once: %d connections (%d from its address) are in their TLS "
                                    "handshake, none of them silent", self.name, _fmt(addr), len(self.places),
                                    self.places.from_host(host))
                conn.close()
                continue
            if victim is not None:
                self._refuse(HANDSHAKE_TIMEOUT)
                pending_log.warning("%s: a connection from %s sent nothing for %.2f s; closed to make room for a "
                                    "newcomer (silent connections cannot hold a TLS port's places)", self.name,
                                    victim.host, now - victim.started)
                self._pending.pop(victim).cancel()
            conn.setblocking(False)
            task = loop.create_task(self._sort(conn, _fmt(addr), place))
            self._pending[place] = task
            task.add_done_callback(lambda _t, place=place: self._forget(place))

    def _forget(self, place: Place) -> None:
        self.places.release(place)
        self._pending.pop(place, None)

    async def _sort(self, conn: socket.socket, peer: str, entry: Place) -> None:
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
