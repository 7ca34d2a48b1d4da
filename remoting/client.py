"""The calling end: one connection per address, opened on first use and reopened after it closes.

``invoke`` sends a request and returns the response whatever its code; transport failures raise
``RemotingError`` subclasses naming the address. Requests the peer sends us (a broker's
NOTIFY_CONSUMER_IDS_CHANGED) go to processors registered with ``register``, as on a server. Concurrent callers
for a new address share one connect; ``close`` ends the connects still in flight with the connections, so no task
of the client outlives it. ``ssl`` (a ``remoting.tls.client_context``) makes every connection TLS; without one, a
client takes the process's inner-client context (a broker's ``tls.enable``), else plain TCP. Not thread-safe: one
event loop.

Connect timeouts: ``connect_timeout_s`` (RocketMQ's 3 s) for the TCP connect of an address in good standing, and
``reconnect_timeout_s`` for one whose connection was lost or whose connect timed out within ``SUSPECT_S``: a killed
container's or a partitioned host's address drops SYNs instead of refusing them, and waiting 3 s there on every
reconnect is what kept a client from the new master after a failover. A live peer answers a SYN from its kernel,
so the short wait costs it nothing. A TLS handshake keeps its own bound (``connect_timeout_s``) after the connect.
"""

from __future__ import annotations

import asyncio
import logging
import socket
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

SUSPECT_S = 30.0  # how long an address whose connection was lost or whose connect hung gets the short connect wait


def tls_args(context: ssl_module.SSLContext | None, host: str, timeout_s: float) -> dict:
    """``create_connection`` keywords for TLS with ``context`` (none for plain TCP)."""
    if context is None:
        return {}
    # the host is named even when it is not checked: a connect over a socket of our own needs it (SNI is sent for
    # names, never for IP addresses)
    return {"ssl": context, "server_hostname": host, "ssl_handshake_timeout": timeout_s}


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
        ssl: ssl_module.SSLContext | None = None, local_host: str | None = None, reconnect_timeout_s: float = 0.5,
    ) -> None:
        self.limits = limits
        self.ssl = ssl if ssl is not None else inner_client_context()
        self.local_host = local_host  # the source address of its connections (None: the system's choice)
        self.connect_timeout_s = connect_timeout_s
        self.reconnect_timeout_s = min(reconnect_timeout_s, connect_timeout_s)
        self.name = name
        self._suspect: dict[str, float] = {}  # address -> loop time its connection was lost or its connect hung
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
        wait_s = self._connect_wait(addr, loop.time())
        try:
            sock = await asyncio.wait_for(self._tcp_connect(host, port), wait_s)
        except TimeoutError:
            self._suspect[addr] = loop.time()
            raise RemotingConnectError(addr, f"no answer to connect within {wait_s:g} s") from None
        except OSError as exc:
            raise RemotingConnectError(addr, exc.strerror or str(exc)) from None
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(self._dispatch, self.limits, on_lost=self._lost, name=self.name), sock=sock,
                    **tls_args(self.ssl, host, self.connect_timeout_s),
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            sock.close()
            raise RemotingConnectError(addr, f"no TLS handshake within {self.connect_timeout_s:g} s") from None
        except ssl_module.SSLCertVerificationError as exc:
            sock.close()
            raise RemotingConnectError(addr, f"TLS handshake failed: {tls_refusal(exc, host)}") from None
        except ssl_module.SSLError as exc:
            sock.close()
            raise RemotingConnectError(addr, f"TLS handshake failed: {exc.reason or exc} (does the trusted CA "
                                             "sign the server's certificate, and does it name this address?)") from None
        except OSError as exc:
            sock.close()
            raise RemotingConnectError(addr, exc.strerror or str(exc)) from None
        except BaseException:
            sock.close()
            raise
        assert isinstance(conn, Connection)
        conn.attrs["addr"] = addr
        self._suspect.pop(addr, None)
        if self._closed:
            conn.close("client closed")
            raise RemotingConnectError(addr, "the client is closed")
        self._conns[addr] = conn
        return conn

    def _connect_wait(self, addr: str, now: float) -> float:
        lost_at = self._suspect.get(addr)
        if lost_at is None:
            return self.connect_timeout_s
        if now - lost_at > SUSPECT_S:
            del self._suspect[addr]
            return self.connect_timeout_s
        return self.reconnect_timeout_s

    async def _tcp_connect(self, host: str, port: int) -> socket.socket:
        """A connected non-blocking TCP socket to the first address of ``host`` that accepts (the source address
        ``local_host`` when set); every socket that failed is closed."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"{host} resolves to no address")
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                if self.local_host is not None:
                    sock.bind((self.local_host, 0))
                await loop.sock_connect(sock, sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
            except BaseException:
                sock.close()
                raise
        assert error is not None
        raise error

    def _lost(self, conn: Connection) -> None:
        addr = conn.attrs.get("addr")
        if addr is not None and self._conns.get(addr) is conn:
            del self._conns[addr]
            if not self._closed:
                self._suspect[addr] = asyncio.get_running_loop().time()
                if len(self._suspect) > 4096:  # bounded: the oldest marks go first
                    for old in sorted(self._suspect, key=self._suspect.__getitem__)[:1024]:
                        del self._suspect[old]

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
            self._suspect[addr] = asyncio.get_running_loop().time()
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
