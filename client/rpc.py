"""gRPC plumbing of the SDK: one cached grpc.aio channel per server address, stubs, and error mapping.

``BrokerChannels`` keeps one channel (and its Messaging and BrokerAdmin stubs) per broker address for the
life of a client; ``close()`` closes them all. ``call()`` runs one unary RPC with a deadline and turns gRPC
failures into ``BrokerUnreachableError`` / ``RequestTimeout`` naming the address; codes in the response are
left to the caller (responses carry them in-band).

``HealthTracker`` remembers addresses that just failed at transport level, so route choices avoid them for
``avoid_s`` seconds (a dead master's consumers move to its slave at once instead of after the nameserver's
expiry) and use them again as soon as the window ends or a call to them succeeds.

Not thread-safe: use from one event loop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc

from client.errors import BrokerError, BrokerUnreachableError, MQClientError, RequestTimeout
from client.exchange import ExchangeClient
from remoting.channel import aio_channel
from remoting.codes import ResponseCode
from remoting.pb import admin_pb2_grpc, broker_pb2_grpc, namesrv_pb2_grpc

log = logging.getLogger(__name__)


def transport_error(exc: grpc.aio.AioRpcError, addr: str, timeout_s: float, request: str = "") -> MQClientError:
    """The SDK error for a failed gRPC call."""
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RequestTimeout(addr, timeout_s, request=request)
    return BrokerUnreachableError(addr, code.name if code else "UNKNOWN", exc.details() or "", request=request)


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


class Stubs:
    __slots__ = ("_exchange", "addr", "admin", "channel", "messaging", "namesrv")

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.channel = aio_channel(addr)
        self.messaging = broker_pb2_grpc.MessagingStub(self.channel)
        self.admin = admin_pb2_grpc.BrokerAdminStub(self.channel)
        self.namesrv = namesrv_pb2_grpc.NameServerStub(self.channel)
        self._exchange: ExchangeClient | None = None

    @property
    def exchange(self) -> ExchangeClient:
        """The multiplexed send/pull stream to this broker (opened on first use)."""
        if self._exchange is None:
            self._exchange = ExchangeClient(self.messaging, self.addr)
        return self._exchange

    async def close(self) -> None:
        if self._exchange is not None:
            await self._exchange.close()
        await self.channel.close(grace=None)


class BrokerChannels:
    """Cached channels and stubs by address, plus the shared HealthTracker."""

    def __init__(self, avoid_s: float = 5.0) -> None:
        self._stubs: dict[str, Stubs] = {}
        self.health = HealthTracker(avoid_s)

    def get(self, addr: str) -> Stubs:
        stubs = self._stubs.get(addr)
        if stubs is None:
            stubs = self._stubs[addr] = Stubs(addr)
        return stubs

    async def call(self, addr: str, method: Any, request: Any, timeout_s: float, name: str = "") -> Any:
        """``await method(request)`` with a deadline; transport failures mark ``addr`` unhealthy and raise."""
        try:
            response = await method(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            self.health.mark_failed(addr)
            raise transport_error(exc, addr, timeout_s, name) from None
        self.health.mark_ok(addr)
        return response

    async def close(self) -> None:
        stubs, self._stubs = list(self._stubs.values()), {}
        for s in stubs:
            await s.close()


async def send_ack(channels: BrokerChannels, addr: str, method: str, request: Any, timeout_s: float) -> bool:
    """Call a Messaging RPC that answers an Ack; True on SUCCESS. Failures are logged, never raised."""
    try:
        ack = await getattr(channels.get(addr).messaging, method)(request, timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        channels.health.mark_failed(addr)
        log.debug("%s", transport_error(exc, addr, timeout_s, method))
        return False
    if ack.code != ResponseCode.SUCCESS:
        log.warning("%s", BrokerError(ack.code, ack.remark, addr, request=method))
        return False
    return True
