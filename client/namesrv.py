"""Calls to the nameservers: one of a ';'-separated list at a time, rotating to the next on transport failure.

RocketMQ's client sticks to one nameserver and moves on when it fails; so does this. A response code is left to
the caller. When every nameserver failed at transport level the call raises ``NoNameserverError``.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from client.errors import NoNameserverError
from remoting.channel import aio_channel
from remoting.pb import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)


def parse_namesrv_addr(namesrv_addr: str | list[str]) -> list[str]:
    parts = namesrv_addr if isinstance(namesrv_addr, list) else namesrv_addr.replace(",", ";").split(";")
    addrs = [p.strip() for p in parts if p.strip()]
    for a in addrs:
        host, _, port = a.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"nameserver address {a!r} is not host:port (separate several with ';')")
    return addrs


class NamesrvClient:
    def __init__(self, namesrv_addr: str | list[str], *, timeout_s: float = 3.0) -> None:
        self.addrs = parse_namesrv_addr(namesrv_addr)
        self.timeout_s = timeout_s
        self._index = 0
        self._stubs: dict[str, namesrv_pb2_grpc.NameServerStub] = {}
        self._channels: list[grpc.aio.Channel] = []

    def _stub(self, addr: str) -> namesrv_pb2_grpc.NameServerStub:
        stub = self._stubs.get(addr)
        if stub is None:
            channel = aio_channel(addr)
            self._channels.append(channel)
            stub = self._stubs[addr] = namesrv_pb2_grpc.NameServerStub(channel)
        return stub

    async def call(self, method_name: str, request: Any, timeout_s: float | None = None) -> Any:
        if not self.addrs:
            raise NoNameserverError([])
        timeout = self.timeout_s if timeout_s is None else timeout_s
        last = ""
        for _ in range(len(self.addrs)):
            addr = self.addrs[self._index % len(self.addrs)]
            try:
                return await getattr(self._stub(addr), method_name)(request, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                last = f"{addr}: {exc.code().name} {exc.details() or ''}".strip()
                log.debug("nameserver %s failed (%s); trying the next", addr, last)
                self._index += 1
        raise NoNameserverError(self.addrs, last)

    async def route(self, topic: str) -> namesrv_pb2.GetRouteInfoResponse:
        return await self.call("GetRouteInfoByTopic", namesrv_pb2.GetRouteInfoRequest(topic=topic))

    async def cluster_info(self) -> namesrv_pb2.GetBrokerClusterInfoResponse:
        return await self.call("GetBrokerClusterInfo", namesrv_pb2.GetBrokerClusterInfoRequest())

    async def close(self) -> None:
        channels, self._channels, self._stubs = self._channels, [], {}
        for ch in channels:
            await ch.close(grace=None)
