"""mqctl's view of a running cluster, built on the SDK's AdminClient (client/admin.py).

The SDK is asyncio; a CLI command is one short sequence of calls. So each command opens a ``Cluster``, which
owns one event loop (``asyncio.Runner``) and one AdminClient, and runs SDK coroutines on it with ``run()``.
On top of the SDK it adds what only an operator tool needs: the list of registered brokers (masters and
slaves), ``-c`` resolved to the masters of a cluster, broker names checked against the nameserver with an
error listing the known ones, and a route look-up whose error says how to create the topic.

Imported only inside command functions: it pulls in the SDK and its event loop.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from client.admin import AdminClient, BrokerData, ClusterInfo
from client.errors import BrokerError, NoNameserverError, NoRouteError
from client.namesrv import NamesrvClient
from client.rpc import tls_context
from common.broker_id import MASTER_ID
from ctl.errors import NamesrvUnreachable, Refused, TopicNotFound, UnknownName, transport_reason
from remoting.frame_codec import RemotingCommand

CALL_TIMEOUT_S = 5.0
T = TypeVar("T")


@dataclass(frozen=True)
class BrokerRef:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str

    @property
    def is_master(self) -> bool:
        return self.broker_id == MASTER_ID


ACCESS_KEY_ENV = "MQCTL_ACCESS_KEY"
SECRET_KEY_ENV = "MQCTL_SECRET_KEY"


def env_credentials() -> tuple[str, str] | None:
    """ACL 2.0 credentials every mqctl request is signed with, from the environment (a secret on the command line
    shows in ``ps``)."""
    if _credentials is not None:
        return _credentials
    access_key, secret_key = os.environ.get(ACCESS_KEY_ENV), os.environ.get(SECRET_KEY_ENV)
    return (access_key, secret_key) if access_key and secret_key else None


# How this mqctl run connects: set by the root command's options (ctl.app) at the start of every invocation, so an
# in-process caller (tests) never inherits the last one's; ``mqctl dev up --secure`` sets both for its own checks.
_tls: ssl.SSLContext | None = None
_credentials: tuple[str, str] | None = None


def use_credentials(credentials: tuple[str, str] | None) -> None:
    """Sign this run's requests with ``credentials`` instead of MQCTL_ACCESS_KEY/MQCTL_SECRET_KEY (None: those)."""
    global _credentials
    _credentials = credentials


def use_tls(*, tls: bool, ca: str = "", cert: str = "", key: str = "") -> None:
    """Every connection of this mqctl run uses TLS (``client.tls_context``); ``ValueError`` when a file does not
    load."""
    global _tls
    _tls = tls_context(tls, ca, cert=cert, key=key)


def tls() -> ssl.SSLContext | None:
    """The TLS context of this mqctl run (None: plain TCP)."""
    return _tls


class Cluster:
    """One command's connections: an AdminClient on a private event loop. Use as a context manager."""

    def __init__(self, namesrv: str, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise NamesrvUnreachable(repr(namesrv), "empty nameserver list")
        self.timeout_s = timeout_s
        self._runner = asyncio.Runner()
        try:
            self.client = AdminClient(";".join(self.namesrv_addrs), timeout_s=timeout_s,
                                      credentials=env_credentials(), tls=tls() or False)
        except ValueError as exc:  # an address that is not host:port
            self._runner.close()
            raise NamesrvUnreachable(namesrv, str(exc)) from None
        self._info: ClusterInfo | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._runner.run(self.client.stop())
        finally:
            self._runner.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one SDK coroutine to completion; a dead nameserver list becomes NamesrvUnreachable."""
        try:
            return self._runner.run(coro)
        except NoNameserverError as exc:
            raise NamesrvUnreachable(";".join(self.namesrv_addrs), transport_reason(exc.last)) from None

    # nameserver ---------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Forget the cached cluster info, so the next call asks the nameserver again (repeat mode)."""
        self._info = None

    def cluster_info(self) -> ClusterInfo:
        if self._info is None:
            self._info = self.run(self.client.cluster_info())
        return self._info

    def brokers(self, cluster: str | None = None) -> list[BrokerRef]:
        """Every registered broker address (masters and slaves), sorted by cluster, name, id."""
        info = self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise UnknownName(
                "cluster",
                cluster,
                list(info.cluster_addr_table),
                hint="pass -c with one of them (see `mqctl clusterList`)",
            )
        refs = []
        for cluster_name, names in info.cluster_addr_table.items():
            if cluster is not None and cluster_name != cluster:
                continue
            for name in names:
                data = info.broker_addr_table.get(name)
                for broker_id, addr in data.broker_addrs.items() if data is not None else ():
                    refs.append(BrokerRef(cluster_name, name, int(broker_id), addr))
        return sorted(refs, key=lambda r: (r.cluster, r.broker_name, r.broker_id))

    def masters(self, cluster: str) -> list[BrokerRef]:
        """The masters of ``cluster`` (mqadmin's ``-c`` rule)."""
        masters = [r for r in self.brokers(cluster) if r.is_master]
        if not masters:
            raise UnknownName("cluster", cluster, [], hint="no master of it is registered; check `mqctl clusterList`")
        return masters

    def target_addrs(self, broker_addr: str | None, cluster: str | None, *, masters_only: bool = True) -> list[str]:
        """The addresses a ``-b | -c`` command acts on (after ``one_target``): -b's, else every master of -c, or
        every broker of it with ``masters_only=False``."""
        if broker_addr:
            return [broker_addr]
        assert cluster is not None, "one_target lets exactly one of -b and -c through"
        return [r.addr for r in (self.masters(cluster) if masters_only else self.brokers(cluster))]

    def broker_names(self) -> list[str]:
        return sorted(self.cluster_info().broker_addr_table)

    def broker_group(self, broker_name: str) -> BrokerData:
        """The BrokerData of ``broker_name``; UnknownName listing the known broker names otherwise."""
        info = self.cluster_info()
        data = info.broker_addr_table.get(broker_name)
        if data is None or not data.broker_addrs:
            raise UnknownName(
                "broker", broker_name, list(info.broker_addr_table), hint="pass a broker name from `mqctl clusterList`"
            )
        return data

    def route(self, topic: str) -> dict[str, Any]:
        """TopicRouteData (RocketMQ's field names); TopicNotFound when the nameserver has none."""
        try:
            route = self.run(self.client.topic_route_raw(topic))
        except NoRouteError:
            raise TopicNotFound(topic) from None
        except BrokerError as exc:
            raise Refused("nameserver", "GET_ROUTEINFO_BY_TOPIC", exc.code, exc.remark) from None
        if not route["brokerDatas"]:
            raise TopicNotFound(topic)
        return route

    def send_route(self, topic: str) -> tuple[dict[str, Any], bool]:
        """The route a producer sends by and whether it is TBW102's (a first send makes the broker create the topic,
        as RocketMQ's producer does); TopicNotFound, saying why, when no broker would create it."""
        try:
            found = self.run(self.client.topic_route_for_send(topic))
        except NoRouteError as exc:
            raise TopicNotFound(topic, why=exc.detail) from None
        except BrokerError as exc:
            raise Refused("nameserver", "GET_ROUTEINFO_BY_TOPIC", exc.code, exc.remark) from None
        if not found.data["brokerDatas"]:
            raise TopicNotFound(topic)
        return found.data, found.is_default

    def each_namesrv(self, code: int, ext: dict[str, str]) -> list[tuple[str, RemotingCommand]]:
        """Send one request to every nameserver that answers (writes must reach all of them); their answers."""

        async def call_all() -> list[tuple[str, RemotingCommand]]:
            answers = []
            last = None
            for addr in self.namesrv_addrs:
                one = NamesrvClient(addr, remoting=self.client.remoting, timeout_s=self.timeout_s)
                try:
                    answers.append((addr, await one.invoke(code, ext)))
                except NoNameserverError as exc:
                    last = exc.last
            if not answers:
                raise NoNameserverError(self.namesrv_addrs, last)
            return answers

        return self.run(call_all())


def read_addr(broker_addrs: dict[int, str], prefer_slave: bool = False) -> tuple[int, str]:
    """RocketMQ's selectBrokerAddr over one group's ``{brokerId: addr}``: the master when listed, else the lowest
    slave; (id, addr)."""
    ids = sorted(int(i) for i in broker_addrs)
    if prefer_slave:
        slaves = [i for i in ids if i != MASTER_ID]
        if slaves:
            return slaves[0], broker_addrs[slaves[0]]
    chosen = MASTER_ID if MASTER_ID in ids else ids[0]
    return chosen, broker_addrs[chosen]
