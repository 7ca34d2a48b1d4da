"""Cluster-wide routes of the v2 endpoint: which broker group owns each queue of a topic, and that group's
master's v2 endpoint, so a RocketMQ 5 client given any one broker as its access point sends to and receives from
every broker group of the topic.

RocketMQ 5's proxy reads the route from the nameserver and rewrites every broker address to
``brokerHost:grpcServerPort`` with *its own* port (one port for the whole cluster). pyrmq brokers each have their
own ``grpcServerPort`` (several share a host in tests and in the compose deployment), so the port is asked from
each master with the ordinary admin request GET_BROKER_CONFIG (26, key ``grpcServerPort``) and cached
(``PORT_TTL_S``; a failure for ``PORT_FAILURE_TTL_S``, so a dead broker does not stall every route answer).
Nothing new goes over the registration: RocketMQ's nameserver and tools see what they always saw.

* **Masters only.** pyrmq pops (v2 reads) run on the master, which holds the checkpoints and revives; slaves
  refuse v2 sends and pops, and the official clients keep broker id 0 only. A group whose master is down is left
  out of the answer (its slave cannot serve v2 clients), so clients use the other groups meanwhile.
* **This broker's own share** comes from its local topic table (fresher than the nameserver's copy right after
  an updateTopic) with its bound port; it is answered even while no nameserver answers.
* The nameserver's route is cached for ``ROUTE_TTL_S`` (clients ask every 30 s, push consumers' assignments every
  5 s), at most ``MAX_CACHED`` topics.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from dataclasses import dataclass

from broker.auth.setup import inner_signer
from broker.context import BrokerContext
from broker.grpc_v2.pb import definition_pb2 as pb
from common import conf
from common.broker_id import MASTER_ID
from common.errors import ConfigError
from common.perm import PERM_RW
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode, describe
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand
from remoting.headers import NumberError, parse_host_port, parse_int
from remoting.topic_route import RouteDataError, read_topic_route

log = logging.getLogger(__name__)

NAMESRV_TIMEOUT_S = 2.0
BROKER_TIMEOUT_S = 1.0
ROUTE_TTL_S = 2.0
PORT_TTL_S = 60.0
PORT_FAILURE_TTL_S = 5.0
MAX_CACHED = 4096


@dataclass(frozen=True)
class Share:
    """One broker group's queues of a topic (a QueueData) and its master's remoting address ('' when down)."""

    broker_name: str
    master_addr: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True)
class Owner:
    """A share with the master's v2 endpoint: what a route or assignment names."""

    share: Share
    host: str
    grpc_port: int

    def endpoints(self) -> pb.Endpoints:
        return endpoints(self.host, self.grpc_port)


class RouteUnknown(Exception):
    """No nameserver answered, or its answer cannot be read: the message says which."""


def endpoints(host: str, port: int) -> pb.Endpoints:
    """An IP literal as IPv4/IPv6, anything else (brokerIP1 may be a DNS name) as DOMAIN_NAME."""
    try:
        scheme = pb.AddressScheme.IPv6 if ipaddress.ip_address(host).version == 6 else pb.AddressScheme.IPv4
    except ValueError:
        scheme = pb.AddressScheme.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def parse_route(body: bytes, topic: str) -> list[Share]:
    """TopicRouteData (GET_ROUTEINFO_BY_TOPIC's body, read by ``remoting.topic_route``) as one Share per broker
    group that has queues of the topic. ``RouteUnknown`` when the body is not a TopicRouteData."""
    try:
        data = read_topic_route(body)
    except RouteDataError as exc:
        raise RouteUnknown(f"the nameserver's route of {topic} is not a TopicRouteData: {exc}") from None
    masters = {bd.broker_name: bd.broker_addrs.get(MASTER_ID, "") for bd in data.broker_datas}
    return [Share(qd.broker_name, masters.get(qd.broker_name, ""), qd.read_queue_nums, qd.write_queue_nums, qd.perm)
            for qd in data.queue_datas]


def parse_grpc_port(body: bytes, addr: str) -> int:
    """``grpcServerPort`` from GET_BROKER_CONFIG's properties text (0: the broker's v2 endpoint is off).
    ``RouteUnknown`` when the key is missing (not a pyrmq broker) or not a port."""
    try:
        props = conf.parse_properties(body.decode("utf-8"), f"GET_BROKER_CONFIG of {addr}")
        value, _line = props["grpcServerPort"]
        return parse_int(value, 0, 65535, what="grpcServerPort")
    except KeyError:
        raise RouteUnknown(f"broker {addr} has no grpcServerPort in its config: it serves no RocketMQ 5 endpoint") from None
    except (ConfigError, UnicodeDecodeError, NumberError) as exc:
        raise RouteUnknown(f"broker {addr}'s config cannot be read: {exc}") from None


def merge_own(shares: list[Share], own: Share | None) -> list[Share]:
    """The nameserver's shares with this broker's own one replaced (or added) by the local view."""
    if own is None:
        return shares
    return [s for s in shares if s.broker_name != own.broker_name] + [own]


class ClusterRoutes:
    def __init__(self, ctx: BrokerContext, *, client: RemotingClient | None = None) -> None:
        self.ctx = ctx
        self.grpc_port = 0  # this broker's bound v2 port, set by the endpoint
        self._client = client
        self._own_client = client is None
        self._routes: dict[str, tuple[float, list[Share] | None]] = {}
        self._ports: dict[str, tuple[float, int | RouteUnknown]] = {}

    @property
    def client(self) -> RemotingClient:
        if self._client is None:
            self._client = RemotingClient(connect_timeout_s=BROKER_TIMEOUT_S, name="v2-routes")
            # route queries and broker configs are checked where ACL 2.0 is on: asked as the brokers' own user
            self._client.signer = inner_signer(self.ctx.settings.auth)
        return self._client

    async def close(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.close()

    # this broker ---------------------------------------------------------------------------------------------
    def own_share(self, topic: str) -> Share | None:
        """This broker's queues of ``topic`` when it is a master that has the topic (perm as it registers it)."""
        if self.ctx.is_slave:
            return None
        cfg = self.ctx.topics.get(topic)
        if cfg is None:
            return None
        broker = self.ctx.settings.broker
        perm = cfg.perm if broker.broker_permission == PERM_RW else broker.broker_permission
        return Share(self.ctx.broker_name, broker.broker_addr, cfg.read_queue_nums, cfg.write_queue_nums, perm)

    # the nameserver ------------------------------------------------------------------------------------------
    async def _fetch_route(self, topic: str) -> list[Share] | None:
        """The nameserver's shares of ``topic``; None when it has no route (TOPIC_NOT_EXIST)."""
        failures = []
        for addr in self.ctx.settings.broker.namesrv_list:
            cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": topic})
            try:
                reply = await self.client.invoke(addr, cmd, NAMESRV_TIMEOUT_S)
            except RemotingError as exc:
                failures.append(f"{addr}: {exc}")
                continue
            if reply.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if reply.code != ResponseCode.SUCCESS:
                failures.append(f"{addr}: {describe(reply.code)} {reply.remark or ''}")
                continue
            return parse_route(reply.body_bytes(), topic)
        raise RouteUnknown("no nameserver answered the route of " + topic
                           + (f" ({'; '.join(failures)})" if failures else " (namesrvAddr is empty)"))

    async def route(self, topic: str) -> list[Share] | None:
        now = time.monotonic()
        hit = self._routes.get(topic)
        if hit is not None and hit[0] > now:
            return hit[1]
        shares = await self._fetch_route(topic)
        if len(self._routes) >= MAX_CACHED:
            self._routes = {t: v for t, v in self._routes.items() if v[0] > now}
            if len(self._routes) >= MAX_CACHED:
                self._routes.clear()
        self._routes[topic] = (now + ROUTE_TTL_S, shares)
        return shares

    # other brokers' v2 ports ---------------------------------------------------------------------------------
    async def _ask_port(self, addr: str) -> int:
        try:
            reply = await self.client.invoke(addr, RemotingCommand(RequestCode.GET_BROKER_CONFIG), BROKER_TIMEOUT_S)
        except RemotingError as exc:
            raise RouteUnknown(f"broker {addr} did not answer GET_BROKER_CONFIG: {exc}") from None
        if reply.code != ResponseCode.SUCCESS:
            raise RouteUnknown(f"broker {addr} refused GET_BROKER_CONFIG: {describe(reply.code)} {reply.remark or ''}")
        return parse_grpc_port(reply.body_bytes(), addr)

    async def grpc_port_of(self, addr: str) -> int:
        """The v2 port of the broker at remoting address ``addr`` (0: its endpoint is off); RouteUnknown if it
        cannot be learned."""
        if addr == self.ctx.settings.broker.broker_addr:
            return self.grpc_port
        now = time.monotonic()
        hit = self._ports.get(addr)
        if hit is None or hit[0] <= now:
            try:
                value: int | RouteUnknown = await self._ask_port(addr)
                ttl = PORT_TTL_S
            except RouteUnknown as exc:
                value, ttl = exc, PORT_FAILURE_TTL_S
            if len(self._ports) >= MAX_CACHED:
                self._ports.clear()
            hit = self._ports[addr] = (time.monotonic() + ttl, value)
        if isinstance(hit[1], RouteUnknown):
            raise hit[1]
        return hit[1]

    # the answer ----------------------------------------------------------------------------------------------
    async def owners(self, topic: str) -> tuple[list[Owner], list[str]]:
        """Every broker group of ``topic`` whose master serves v2, and why the others were left out.
        ``RouteUnknown`` when neither a nameserver nor this broker knows the topic's route; an empty list with no
        reasons means the topic exists nowhere."""
        own = self.own_share(topic)
        try:
            shares = await self.route(topic)
        except RouteUnknown as exc:
            if own is None:
                raise
            log.warning("%s; answering this broker's queues only", exc)
            shares = []
        shares = merge_own(shares or [], own)
        left_out: list[str] = []

        async def resolve(share: Share) -> Owner | None:
            if not share.master_addr:
                left_out.append(f"{share.broker_name}: no master registered (down?)")
                return None
            try:
                host, _ = parse_host_port(share.master_addr, "master address")
                port = await self.grpc_port_of(share.master_addr)
            except (RouteUnknown, NumberError) as exc:
                left_out.append(f"{share.broker_name}: {exc}")
                return None
            if port == 0:
                left_out.append(f"{share.broker_name}: its master has grpcServerPort=0 (RocketMQ 5 endpoint off)")
                return None
            return Owner(share, host, port)

        found = await asyncio.gather(*(resolve(s) for s in shares))
        if left_out:
            log.warning("route of %s for RocketMQ 5 clients leaves out %s", topic, "; ".join(left_out))
        owners = sorted((o for o in found if o is not None), key=lambda o: o.share.broker_name)
        return owners, left_out
