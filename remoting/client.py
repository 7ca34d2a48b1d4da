"""The calling end: one connection per address, opened on first use and reopened after it closes.

``invoke`` sends a request and returns the response whatever its code; transport failures raise
``RemotingError`` subclasses naming the address. Requests the peer sends us (a broker's
NOTIFY_CONSUMER_IDS_CHANGED) go to processors registered with ``register``, as on a server. Concurrent callers
for a new address share one connect; ``close`` ends the connects still in flight with the connections, so no task
of the client outlives it. ``ssl`` (a ``remoting.tls.client_context``) makes every connection TLS; without one, a
client takes the process's inner-client context (a broker's ``tls.enable``), else plain TCP. Not thread-safe: one
event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
from collections.abc import Callable

from remoting.codes import ResponseCode
from remoting.connection import DEFAULT_LIMITS, Connection, Limits
from remoting.errors import RemotingConnectError
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import parse_host_port
from remoting.server import Processor
from remoting.tls import inner_client_context

log = logging.getLogger(__name__)


def tls_args(context: ssl_module.SSLContext | None, host: str, timeout_s: float) -> dict:
    """``create_connection`` keywords for TLS with ``context`` (none for plain TCP)."""
    if context is None:
        return {}
    return {"ssl": context, "server_hostname": host if context.check_hostname else None,
            "ssl_handshake_timeout": timeout_s}


def split_addr(addr: str) -> tuple[str, int]:
    """``(host, port)`` of an address a route or a caller gave; ``ValueError`` when it is not host:port."""
    return parse_host_port(addr)


def tls_refusal(exc: ssl_module.SSLCertVerificationError, host: str) -> str:
    """Why the server's certificate was refused, and what to do, in an operator's words (OpenSSL's verify codes:
    10 expired, 9 not yet valid, 62 host name mismatch, 64 IP address mismatch)."""
    code = exc.verify_code
    if code == 10:
        return ("the server's certificate has expired: renew it (its tls.server.certPath) and restart the server; "
                "check the server's and this host's clocks")
    if code == 9:
        return "the server's certificate is not valid yet: check the server's and this host's clocks"
    if code in (62, 64):
        return (f"the server's certificate does not name {host}: reissue it with {host} in its subjectAltName, or "
                "dial a name it holds (tls.client.verifyHostname=false, the SDK's tls_context(verify_hostname="
                "False), turns this check off: any certificate the CA signed is then taken)")
    return (f"{exc.verify_message or exc.reason or exc} (does the trusted CA sign the server's certificate, and "
            "does it name this address?)")


class RemotingClient:
    def __init__(
        self, *, limits: Limits = DEFAULT_LIMITS, connect_timeout_s: float = 3.0, name: str = "client",
        ssl: ssl_module.SSLContext | None = None, local_host: str | None = None,
    ) -> None:
        self.limits = limits
        self.ssl = ssl if ssl is not None else inner_client_context()
        self.local_host = local_host  # the source address of its connections (None: the system's choice)
        self.connect_timeout_s = connect_timeout_s
        self.name = name
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._processors: dict[int, Processor] = {}
        self._closed = False
        # signs each request before it is sent (remoting.acl_signature.signer: ACL credentials), None: unsigned
        self.signer: Callable[[RemotingCommand], None] | None = None

    def register(self, code: int, processor: Processor) -> None:
        self._processors[int(code)] = processor

    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> object:
        processor = self._processors.get(cmd.code)
        if processor is None:
            return response_to(
                cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported by this client"
            )
        return processor(conn, cmd)

    @property
    def connecting(self) -> frozenset[str]:
        """Addresses with a connect in flight."""
        return frozenset(self._connecting)

    def cached(self, addr: str) -> Connection | None:
        conn = self._conns.get(addr)
        return conn if conn is not None and conn.is_open else None

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        if self._closed:
            raise RemotingConnectError(addr, "the client is closed")
        pending = self._connecting.get(addr)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(addr))
            self._connecting[addr] = pending
            pending.add_done_callback(lambda _f, a=addr: self._connecting.pop(a, None))
        return await asyncio.shield(pending)

    async def _connect(self, addr: str) -> Connection:
        try:
            host, port = split_addr(addr)
        except ValueError as exc:
            raise RemotingConnectError(addr, str(exc)) from None
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(self._dispatch, self.limits, on_lost=self._lost, name=self.name), host, port,
                    local_addr=None if self.local_host is None else (self.local_host, 0),
                    **tls_args(self.ssl, host, self.connect_timeout_s),
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise RemotingConnectError(addr, f"no answer to connect within {self.connect_timeout_s:g} s") from None
        except ssl_module.SSLCertVerificationError as exc:
            raise RemotingConnectError(addr, f"TLS handshake failed: {tls_refusal(exc, host)}") from None
        except ssl_module.SSLError as exc:
            raise RemotingConnectError(addr, f"TLS handshake failed: {exc.reason or exc} (does the trusted CA "
                                             "sign the server's certificate, and does it name this address?)") from None
        except OSError as exc:
            raise RemotingConnectError(addr, exc.strerror or str(exc)) from None
        assert isinstance(conn, Connection)
        conn.attrs["addr"] = addr
        if self._closed:
            conn.close("client closed")
            raise RemotingConnectError(addr, "the client is closed")
        self._conns[addr] = conn
        return conn

    def _lost(self, conn: Connection) -> None:
        addr = conn.attrs.get("addr")
        if addr is not None and self._conns.get(addr) is conn:
            del self._conns[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        conn = await self.connection(addr)
        if self.signer is not None:
            self.signer(cmd)
        return await conn.invoke(cmd, timeout_s)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        if self.signer is not None:
            self.signer(cmd)
        conn.invoke_oneway(cmd)

    def drop(self, addr: str, reason: str = "dropped") -> None:
        """Close the connection to ``addr`` (a peer found dead); the next call reconnects."""
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.abort(reason)

    async def close(self) -> None:
        """Close every connection and end every connect still in flight (a peer that never answers the SYN),
        so no task of this client outlives it."""
        self._closed = True
        connecting = list(self._connecting.values())
        for pending in connecting:
            pending.cancel()
        if connecting:
            await asyncio.gather(*connecting, return_exceptions=True)
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close("client closed")
        for conn in conns:
            if conn.closed is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(conn.closed), 1.0)
                except TimeoutError:
                    conn.abort("client closed")
