"""Remoting plumbing of the SDK: one RemotingClient per SDK instance, health marks, error mapping.

Every Producer, PushConsumer, PullConsumer and AdminClient owns one ``ClientRemoting``: one
``remoting.client.RemotingClient`` (one connection per address, many requests in flight on it, answers matched
by opaque) shared by its nameserver calls, its sends, pulls, offset commits and heartbeats, plus the processors
for the requests brokers send us (NOTIFY_CONSUMER_IDS_CHANGED). ``close()`` closes every connection.

``invoke`` returns the response whatever its code; transport failures (``remoting.errors.RemotingError``)
become ``RequestTimeout`` (no answer in time) or ``BrokerUnreachableError`` (connect refused, connection lost,
too many requests waiting) naming the address and the request. ``call`` also turns a code other than SUCCESS
into ``BrokerError`` with the server's remark.

``HealthTracker`` remembers addresses that just failed at transport level, so route choices avoid them for
``avoid_s`` seconds (a dead master's consumers move to its slave at once instead of after the nameserver's
expiry) and use them again as soon as the window ends or a call to them succeeds.

Not thread-safe: use from one event loop.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Mapping

from client.errors import BrokerError, BrokerUnreachableError, MQClientError, RequestTimeout
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.acl_signature import signer
from remoting.connection import Limits
from remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
    RemotingTooManyRequests,
)
from remoting.frame_codec import RemotingCommand
from remoting.server import Processor
from remoting.tls import TlsFileError, client_context

log = logging.getLogger(__name__)

Body = bytes | memoryview | list[bytes | memoryview]


def request_name(code: int) -> str:
    """``SEND_BATCH_MESSAGE (320)`` for error texts."""
    try:
        return f"{RequestCode(code).name} ({code})"
    except ValueError:
        return f"request {code}"


def client_error(exc: RemotingError, request: str = "", request_code: int = 0) -> MQClientError:
    """The SDK error for a failed remoting call (the transport failed; no response arrived)."""
    if isinstance(exc, RemotingTimeoutError):
        return RequestTimeout(exc.addr, exc.timeout_s, request=request, request_code=request_code)
    if isinstance(exc, RemotingConnectError):
        status = "CONNECT_FAILED"
    elif isinstance(exc, RemotingClosedError):
        status = "CONNECTION_CLOSED"
    elif isinstance(exc, RemotingTooManyRequests):
        status = "TOO_MANY_REQUESTS"
    else:
        status = "TRANSPORT_ERROR"
    return BrokerUnreachableError(exc.addr, status, exc.detail, request=request, request_code=request_code)


class HealthTracker:
    """Per-address "failed recently" marks with an expiry."""

    def __init__(self, avoid_s: float = 5.0) -> None:
        self.avoid_s = avoid_s
        self._failed_until: dict[str, float] = {}

    def mark_failed(self, addr: str) -> None:
        self._failed_until[addr] = time.monotonic() + self.avoid_s

    def mark_ok(self, addr: str) -> None:
        if self._failed_until:
            self._failed_until.pop(addr, None)

    def healthy(self, addr: str) -> bool:
        until = self._failed_until.get(addr)
        if until is None:
            return True
        if time.monotonic() >= until:
            del self._failed_until[addr]
            return True
        return False


def command(code: int, ext: Mapping[str, str] | None = None, body: Body = b"") -> RemotingCommand:
    """A request stamped as this SDK sends it (language PYTHON, version V4_9_7, JSON header)."""
    return RemotingCommand(code, ext=dict(ext) if ext is not None else None, body=body)


async def best_effort(call: Awaitable[RemotingCommand]) -> bool:
    """Await a ``ClientRemoting.call`` of a best-effort request (heartbeat, unregister): True on SUCCESS; a refusal
    is logged as a warning, a transport failure at debug level."""
    try:
        await call
    except BrokerError as exc:
        log.warning("%s", exc)
        return False
    except MQClientError as exc:
        log.debug("%s", exc)
        return False
    return True


def tls_context(tls: bool | ssl.SSLContext = False, ca: str = "", *, cert: str = "", key: str = "",
                verify_hostname: bool = True) -> ssl.SSLContext | None:
    """The SDK's TLS: ``tls=True`` verifies the servers against ``ca`` (a PEM file; empty: the system's CAs) and,
    with ``cert``/``key``, presents a client certificate (mutual TLS); an ``ssl.SSLContext`` is used as it is;
    ``False`` is plain TCP. A file that does not load raises ``ValueError`` naming the argument."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    if not tls:
        if ca or cert or key:
            raise ValueError("tls_ca / cert / key given without tls=True: pass tls=True to connect with TLS")
        return None
    try:
        return client_context(trust=ca, cert=cert, key=key, verify_hostname=verify_hostname, prefix="tls")
    except TlsFileError as exc:
        raise ValueError(f"{exc.problem.replace('tls.', '')}; {exc.hint} ({exc.key.replace('tls.trustCertPath', 'tls_ca')})") from None


class ClientRemoting:
    """The remoting side of one SDK instance: its RemotingClient and the HealthTracker its route choices use."""

    def __init__(
        self,
        *,
        avoid_failed_s: float = 5.0,
        connect_timeout_s: float = 3.0,
        name: str = "pyrmq-client",
        limits: Limits | None = None,
        credentials: tuple[str, str] | None = None,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str = "",
    ) -> None:
        self.client = RemotingClient(limits=limits or Limits(), connect_timeout_s=connect_timeout_s, name=name,
                                     ssl=tls_context(tls, tls_ca))
        self.health = HealthTracker(avoid_failed_s)
        if credentials is not None:
            self.use_credentials(*credentials)

    def use_credentials(self, access_key: str, secret_key: str) -> None:
        """Sign every request with an ACL 2.0 user (RocketMQ's AccessKey/Signature extFields)."""
        self.client.signer = signer(access_key, secret_key)

    def register(self, code: int, processor: Processor) -> None:
        """Serve ``code`` when a broker sends it to us (e.g. NOTIFY_CONSUMER_IDS_CHANGED)."""
        self.client.register(code, processor)

    async def invoke(self, addr: str, request: RemotingCommand, timeout_s: float, what: str = "") -> RemotingCommand:
        """Send ``request`` to ``addr`` and return the response, whatever its code.

        A transport failure marks ``addr`` unhealthy and raises ``RequestTimeout`` / ``BrokerUnreachableError``;
        any answer marks it healthy again."""
        try:
            response = await self.client.invoke(addr, request, timeout_s)
        except RemotingError as exc:
            self.health.mark_failed(addr)
            raise client_error(exc, what or request_name(request.code), request.code) from None
        self.health.mark_ok(addr)
        return response

    async def call(
        self,
        addr: str,
        code: int,
        ext: Mapping[str, str] | None = None,
        body: Body = b"",
        *,
        timeout_s: float,
        what: str = "",
    ) -> RemotingCommand:
        """``invoke`` a fresh request and demand SUCCESS: another code raises ``BrokerError`` with the remark."""
        name = what or request_name(code)
        response = await self.invoke(addr, command(code, ext, body), timeout_s, name)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark or "", addr, request=name, request_code=code)
        return response

    async def oneway(self, addr: str, code: int, ext: Mapping[str, str] | None = None, body: Body = b"") -> bool:
        """Send without waiting for an answer (RocketMQ's invokeOneway); False when the connection failed."""
        try:
            await self.client.invoke_oneway(addr, command(code, ext, body))
        except RemotingError as exc:
            self.health.mark_failed(addr)
            log.debug("%s", client_error(exc, request_name(code), code))
            return False
        return True

    def drop(self, addr: str, reason: str = "dropped by the client") -> None:
        self.client.drop(addr, reason)

    async def close(self) -> None:
        await self.client.close()
