"""Calls to the nameservers over remoting: one of a ';'-separated list at a time, rotating on transport failure.

RocketMQ's client sticks to one nameserver and moves on when it fails; so does this. When every nameserver
failed at transport level the call raises ``NoNameserverError`` naming them all and the last failure.

Bodies are parsed with ``remoting.fastjson`` (standard JSON and fastjson's bare numeric keys alike) into plain
dicts with RocketMQ's field names; ``brokerAddrs`` keys become ints whichever way they were written:

- ``topic_route_data(topic)``: GET_ROUTEINFO_BY_TOPIC (105), a ``remoting.topic_route.TopicRouteData`` (spec
  §5.3, the one reader of that body); TOPIC_NOT_EXIST (17) raises ``NoRouteError``, another code ``BrokerError``;
- ``cluster_info()``: GET_BROKER_CLUSTER_INFO (106), ClusterInfo (spec §5.4).

A namesrv answers an unknown code with silence (spec §1.6), which shows here as ``NoNameserverError`` after
every nameserver timed out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from client.errors import BrokerError, MQClientError, NoNameserverError, NoRouteError
from common.ports import DEFAULT_NAMESRV_ADDR
from client.rpc import Body, ClientRemoting, command, request_name
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from remoting.headers import LONG_MAX, NumberError, parse_host_port, parse_int
from remoting.topic_route import RouteDataError, TopicRouteData, read_topic_route

log = logging.getLogger(__name__)


def parse_namesrv_addr(namesrv_addr: str | list[str]) -> list[str]:
    parts = namesrv_addr if isinstance(namesrv_addr, list) else namesrv_addr.replace(",", ";").split(";")
    addrs = [p.strip() for p in parts if p.strip()]
    for a in addrs:
        try:
            parse_host_port(a, "nameserver address")
        except NumberError as exc:
            raise ValueError(f"{exc} (separate several with ';')") from None
    return addrs


def broker_addrs(broker_data: Mapping[str, Any]) -> dict[int, str]:
    """A BrokerData's ``brokerAddrs`` with int ids (fastjson writes them bare, standard JSON quoted)."""
    addrs = broker_data.get("brokerAddrs") or {}
    return {parse_int(k, 0, LONG_MAX, what="brokerId"): str(v) for k, v in addrs.items()}


def parse_body(response: RemotingCommand, what: str) -> Any:
    try:
        return fastjson.loads(response.body_bytes() or b"{}")
    except (fastjson.JsonBodyError, UnicodeDecodeError) as exc:
        raise MQClientError(
            f"{what}: the answer's body is not JSON: {exc}", hint="check the server's version"
        ) from None


class NamesrvClient:
    def __init__(
        self, namesrv_addr: str | list[str], *, remoting: ClientRemoting | None = None, timeout_s: float = 3.0
    ) -> None:
        self.addrs = parse_namesrv_addr(namesrv_addr)
        self.timeout_s = timeout_s
        self._own = remoting is None
        self.remoting = remoting if remoting is not None else ClientRemoting(name="pyrmq-namesrv-client")
        self._index = 0

    @property
    def current(self) -> str:
        """The nameserver calls go to now (the last one that answered)."""
        return self.addrs[self._index % len(self.addrs)] if self.addrs else ""

    async def invoke(
        self, code: int, ext: Mapping[str, str] | None = None, body: Body = b"", timeout_s: float | None = None
    ) -> RemotingCommand:
        """The response of the first nameserver that answers (any code)."""
        if not self.addrs:
            raise NoNameserverError([])
        timeout = self.timeout_s if timeout_s is None else timeout_s
        last: MQClientError | None = None
        for _ in range(len(self.addrs)):
            addr = self.current
            try:
                return await self.remoting.invoke(addr, command(code, ext, body), timeout, request_name(code))
            except MQClientError as exc:
                last = exc
                log.debug("nameserver %s failed (%s); trying the next", addr, exc.message)
                self._index += 1
        raise NoNameserverError(self.addrs, last)

    async def call(
        self, code: int, ext: Mapping[str, str] | None = None, body: Body = b"", timeout_s: float | None = None
    ) -> RemotingCommand:
        """``invoke`` and demand SUCCESS (``BrokerError`` with the nameserver's remark otherwise)."""
        response = await self.invoke(code, ext, body, timeout_s)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark or "", self.current, request=request_name(code),
                              request_code=code)
        return response

    async def topic_route_data(self, topic: str) -> TopicRouteData:
        """TopicRouteData of ``topic``, read by ``remoting.topic_route`` (MQClientError when it cannot be)."""
        response = await self.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NoRouteError(topic, response.remark or "the nameserver has no route for it")
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(
                response.code, response.remark or "", self.current, request=f"GET_ROUTEINFO_BY_TOPIC {topic}",
                request_code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
            )
        try:
            return read_topic_route(response.body_bytes())
        except RouteDataError as exc:
            raise MQClientError(f"route of {topic} from {self.current}: {exc}", hint="check the nameserver's version"
                                ) from None

    async def cluster_info(self) -> dict[str, Any]:
        """ClusterInfo: ``brokerAddrTable`` {brokerName: BrokerData with int ``brokerAddrs`` keys} and
        ``clusterAddrTable`` {cluster: [brokerName, ...]}."""
        response = await self.call(RequestCode.GET_BROKER_CLUSTER_INFO)
        data = parse_body(response, "cluster info")
        if not isinstance(data, dict):
            raise MQClientError("cluster info: the body is not a ClusterInfo object")
        table = data.get("brokerAddrTable") or {}
        data["brokerAddrTable"] = {str(name): {**bd, "brokerAddrs": broker_addrs(bd)} for name, bd in table.items()}
        data["clusterAddrTable"] = {
            str(c): list(names or []) for c, names in (data.get("clusterAddrTable") or {}).items()
        }
        return data

    async def close(self) -> None:
        if self._own:
            await self.remoting.close()
