"""A remoting server: accepts connections and dispatches each request by its code to a processor.

A processor is ``(conn, request) -> response | None | awaitable``; ``remoting.connection`` runs it and bounds
what each connection may hold. A code nobody registered is answered REQUEST_CODE_NOT_SUPPORTED with a remark
naming it (RocketMQ's nameserver stays silent there and lets the caller time out; we never do). Connections
idle for ``idle_timeout_s`` with nothing in flight are closed (RocketMQ: 120 s), and callbacks registered with
``on_close`` learn of every closed connection (the nameserver drops a broker whose connection closes).

Every connection reports what it holds to ``held_bytes``, the process's cap over all its connections (one
``HeldBytes`` shared by every server of a process: the broker's listen and fast ports count together). The kernel
drains written answers without a callback, so a sweep re-counts every connection each ``ACCOUNT_PERIOD_S``.

With ``tls`` in permissive or enforcing mode (``remoting.tls``), a ``GuardedListener`` accepts instead of
``create_server``: it sorts each connection into TLS or plaintext by its first byte, bounds the handshake, and
counts what it refuses against ``held_bytes`` with the other closes.

``stop()`` stops accepting, gives requests being served ``grace_s`` to finish, then closes every connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from remoting.codes import ResponseCode
from remoting.connection import DEFAULT_LIMITS, Connection, Limits
from remoting.frame_codec import RemotingCommand, response_to
from remoting.held_bytes import HeldBytes
from remoting.tls import TlsConfig, TlsMode
from remoting.tls_listener import GuardedListener

log = logging.getLogger(__name__)

ACCOUNT_PERIOD_S = 1.0

Processor = Callable[[Connection, RemotingCommand], object]


class RemotingServer:
    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        *,
        limits: Limits = DEFAULT_LIMITS,
        idle_timeout_s: float = 120.0,
        held_bytes: HeldBytes | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.limits = limits
        self.held_bytes = held_bytes if held_bytes is not None else HeldBytes(name=name)
        self.idle_timeout_s = idle_timeout_s
        self.connections: set[Connection] = set()
        self._processors: dict[int, Processor] = {}
        self._on_close: list[Callable[[Connection], None]] = []
        self.tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        self._server: asyncio.base_events.Server | GuardedListener | None = None
        self._idle_task: asyncio.Task | None = None
        # ACL 2.0 (broker.auth.gate): checks each request before its processor, None when off (the default)
        self.gate: Callable[[Connection, RemotingCommand], RemotingCommand | None] | None = None

    def register(self, code: int, processor: Processor) -> None:
        self._processors[int(code)] = processor

    def on_close(self, callback: Callable[[Connection], None]) -> None:
        self._on_close.append(callback)

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._processors)

    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> object:
        processor = self._processors.get(cmd.code)
        if processor is None:
            return response_to(
                cmd,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {cmd.code} not supported by this {self.name}",
            )
        if self.gate is not None:
            refusal = self.gate(conn, cmd)
            if refusal is not None:
                return refusal
        return processor(conn, cmd)

    def _new_connection(self) -> Connection:
        return Connection(self._dispatch, self.limits, on_lost=self._lost, name=self.name,
                          held_bytes=self.held_bytes, on_made=self.connections.add)

    def _lost(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for callback in self._on_close:
            callback(conn)

    async def start(self) -> int:
        """Listen and return the bound port (``port=0`` picks a free one)."""
        loop = asyncio.get_running_loop()

        def factory() -> Connection:
            return self._new_connection()  # listed in self.connections once made (a failed handshake never is)

        if self.tls is not None:
            context = self.tls.server_context()
            assert context is not None
            listener = GuardedListener(self.name, self.host, self.port, mode=self.tls.mode, context=context,
                                       protocol_factory=factory, handshake_timeout_s=self.tls.handshake_timeout_s,
                                       on_refused=self.held_bytes.closed)
            self.port = await listener.start()
            self._server = listener
            self._idle_task = loop.create_task(self._close_idle(), name=f"{self.name}-idle")
            log.info("%s: TLS %s on port %d", self.name, self.tls.mode.value, self.port)
            return self.port
        try:
            self._server = await loop.create_server(factory, self.host, self.port, reuse_address=True, backlog=1024)
        except OSError as exc:
            raise OSError(
                f"{self.name} cannot listen on {self.host}:{self.port} ({exc.strerror or exc});"
                " choose another port or stop the process that holds it"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._idle_task = loop.create_task(self._close_idle(), name=f"{self.name}-idle")
        return self.port

    async def _close_idle(self) -> None:
        idle_period = max(0.5, min(10.0, self.idle_timeout_s / 4))
        next_idle_scan = time.monotonic() + idle_period
        while True:
            await asyncio.sleep(min(ACCOUNT_PERIOD_S, idle_period))
            for conn in list(self.connections):
                conn.account()
            now = time.monotonic()
            if now < next_idle_scan:
                continue
            next_idle_scan = now + idle_period
            deadline = now - self.idle_timeout_s
            for conn in list(self.connections):
                if conn.last_read < deadline and not conn.serving and not conn.waiting:
                    log.info("%s: closing %s, idle for %.0f s", self.name, conn.peer, self.idle_timeout_s)
                    conn.close("idle")

    async def stop(self, grace_s: float = 5.0) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        if self._server is None:
            return
        self._server.close()
        deadline = time.monotonic() + grace_s
        while any(c.serving for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.close("server stopping")
        try:
            await asyncio.wait_for(self._server.wait_closed(), timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            pass
        self._server = None
