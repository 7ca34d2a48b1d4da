"""Topic routes from the nameservers, and the address choices of RocketMQ's MQClientInstance.

Routes of every topic the client used are re-read every ``poll_interval_s`` (30 s, RocketMQ's
pollNameServerInterval) and on demand when a send or pull fails (``refresh_soon``): a master that died or handed
its role on (controller mode) shows in the route as soon as the nameserver knows, not at the next poll. Bounded:
at most one refresh in flight per topic and the next no sooner than ``min_refresh_interval_s`` (0.2 s) after the
last, so a failing stream of sends costs a nameserver at most five route reads a second per topic and client.
``wait_for_master`` lets a send wait for the route to name another master of its group (a failover) instead of
failing at once; ``stats`` counts polls, on-demand refreshes and route changes, so a test can tell which of them
brought the route a send used.
From a route (spec §2.7):

- publish queues: ``write_queue_nums`` queues of every writable QueueData whose BrokerData has a master (id 0);
- subscribe queues: ``read_queue_nums`` queues of every readable QueueData.

``find_broker_address_in_subscribe`` follows spec §5.4 (exact id; id+1 for slave ids; else the lowest id) and
then the HealthTracker: an address that just failed at transport level is skipped in favour of a healthy
sibling of the same group, so consumers move to the slave when the master dies without waiting for the
nameserver's expiry, and move back when the master answers again. ``find_broker_address_in_publish`` is the
master (id 0) only.

A topic the nameserver does not know (TOPIC_NOT_EXIST) can get a *default route* for the producer, RocketMQ's
TBW102 path (``default_route_data``): the route of ``TBW102`` (which brokers with autoCreateTopicEnable register)
with each group's queues capped at ``default_topic_queue_nums``, so the first send lets such a broker create it. When no
broker registers TBW102 either, the route falls back to ``default_topic_queue_nums`` queues on every master of
the cluster (GET_BROKER_CLUSTER_INFO), so the send reaches a broker that says why it refuses (TOPIC_NOT_EXIST,
"enable autoCreateTopicEnable") instead of failing in the client with less to go on. A default route is re-read
every few seconds until the real one appears.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from client.errors import NoRouteError
from client.message import MessageQueue
from client.namesrv import NamesrvClient
from client.rpc import HealthTracker
from common.broker_id import MASTER_ID
from common.perm import PERM_READ, PERM_WRITE
from remoting.message_headers import DEFAULT_TOPIC
from remoting.topic_route import TopicRouteData, read_topic_route

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_ROUTE_POLL_S = 3.0
MIN_REFRESH_INTERVAL_S = 0.2


@dataclass(slots=True)
class RouteStats:
    polled: int = 0  # refreshes the poll made (every poll_interval_s per topic)
    on_demand: int = 0  # refreshes refresh_soon started after a failure
    coalesced: int = 0  # refresh_soon calls that started none: one was in flight or ran less than the interval ago
    changes: int = 0  # routes installed that differ from the cached one (addresses or queues)


@dataclass(slots=True)
class TopicRoute:
    topic: str
    publish_queues: list[MessageQueue]
    subscribe_queues: list[MessageQueue]
    broker_addrs: dict[str, dict[int, str]]  # brokerName -> {brokerId: addr}
    is_default: bool = False  # built from the cluster's masters because the topic does not exist yet
    fetched_at: float = field(default_factory=time.monotonic)
    version: int = 0  # how many times this topic's route changed in this cache (0: as first read)

    def same_as(self, other: TopicRoute) -> bool:
        return (self.broker_addrs == other.broker_addrs and self.publish_queues == other.publish_queues
                and self.subscribe_queues == other.subscribe_queues and self.is_default == other.is_default)


def route_from_data(topic: str, data: TopicRouteData, *, max_write_queues: int | None = None) -> TopicRoute:
    """Pure: a TopicRoute from a TopicRouteData (spec §5.3; read by ``remoting.topic_route``).

    ``max_write_queues`` caps each group's publish queues (the TBW102 path's defaultTopicQueueNums)."""
    addrs = {bd.broker_name: dict(bd.broker_addrs) for bd in data.broker_datas}
    publish: list[MessageQueue] = []
    subscribe: list[MessageQueue] = []
    for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
        name, perm = qd.broker_name, qd.perm
        if perm & PERM_WRITE and MASTER_ID in addrs.get(name, {}):
            n = qd.write_queue_nums
            if max_write_queues is not None:
                n = min(n, max_write_queues)
            publish.extend(MessageQueue(topic, name, i) for i in range(n))
        if perm & PERM_READ:
            subscribe.extend(MessageQueue(topic, name, i) for i in range(qd.read_queue_nums))
    return TopicRoute(topic, publish, subscribe, addrs)


def build_route(
    topic: str,
    queue_datas: Iterable[Mapping[str, Any]],
    broker_datas: Iterable[Mapping[str, Any]],
    *,
    max_write_queues: int | None = None,
) -> TopicRoute:
    """``route_from_data`` of QueueData and BrokerData objects with RocketMQ's names, read by the one
    TopicRouteData reader (``RouteDataError``, a ValueError, names a bad field)."""
    data = read_topic_route({"queueDatas": list(queue_datas), "brokerDatas": list(broker_datas)})
    return route_from_data(topic, data, max_write_queues=max_write_queues)


def default_route_data(template: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """Pure: RocketMQ's producer fallback for a topic the nameserver has no route for (MQClientInstance's
    ``updateTopicRouteInfoFromNameServer`` with ``isDefault``): the ``TBW102`` TopicRouteData ``template`` with each
    QueueData's read and write queues set to ``min(queue_nums, readQueueNums)`` (defaultTopicQueueNums, 4)."""
    capped = [(qd, min(queue_nums, qd.read_queue_nums)) for qd in template.queue_datas]
    queue_datas = tuple(replace(qd, read_queue_nums=n, write_queue_nums=n) for qd, n in capped)
    return replace(template, queue_datas=queue_datas)


class RouteCache:
    def __init__(
        self,
        namesrv: NamesrvClient,
        health: HealthTracker,
        *,
        poll_interval_s: float = 30.0,
        default_topic_queue_nums: int = 4,
        min_refresh_interval_s: float = MIN_REFRESH_INTERVAL_S,
    ) -> None:
        self.namesrv = namesrv
        self.min_refresh_interval_s = min_refresh_interval_s
        self.stats = RouteStats()
        self._changed = asyncio.Event()  # set (and replaced) whenever an installed route differs from the cached one
        self.health = health
        self.poll_interval_s = poll_interval_s
        self.default_topic_queue_nums = default_topic_queue_nums
        self._routes: dict[str, TopicRoute] = {}
        self._brokers: dict[str, dict[int, str]] = {}
        self._refreshing: dict[str, asyncio.Task] = {}
        self._last_refresh: dict[str, float] = {}
        self._poll_task: asyncio.Task | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._stopped = False

    # lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._stopped = False
        if self._poll_task is None:
            self._poll_task = asyncio.get_running_loop().create_task(self._poll_loop(), name="route-cache.poll")

    async def stop(self) -> None:
        """End the poll and every background refresh; ``refresh_soon`` starts none after this."""
        self._stopped = True
        tasks = [t for t in [self._poll_task, *self._refreshing.values()] if t is not None]
        self._poll_task = None
        self._refreshing.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _poll_loop(self) -> None:
        tick_s = min(self.poll_interval_s, DEFAULT_ROUTE_POLL_S)
        while True:
            await asyncio.sleep(tick_s)
            now = time.monotonic()
            for topic, route in list(self._routes.items()):
                due = DEFAULT_ROUTE_POLL_S if route.is_default else self.poll_interval_s
                if now - route.fetched_at >= due:
                    self.stats.polled += 1
                    try:
                        await self.refresh(topic, allow_default=route.is_default)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # keep the old route; try again next period
                        log.warning("route refresh of %s failed: %s", topic, exc)
                        route.fetched_at = now

    # routes -----------------------------------------------------------------------------------------------
    def cached(self, topic: str) -> TopicRoute | None:
        return self._routes.get(topic)

    async def get(self, topic: str, *, allow_default: bool = False) -> TopicRoute:
        route = self._routes.get(topic)
        if route is not None:
            return route
        return await self.refresh(topic, allow_default=allow_default)

    async def refresh(self, topic: str, *, allow_default: bool = False) -> TopicRoute:
        """Read ``topic``'s route now. A caller arriving while a read of it is in flight takes that read's route
        instead of making another (the pulls of many queues failing together ask once)."""
        lock = self._locks.setdefault(topic, asyncio.Lock())
        if lock.locked():
            async with lock:
                pass
            route = self._routes.get(topic)
            if route is not None:
                return route
        async with lock:
            self._last_refresh[topic] = time.monotonic()
            try:
                route = route_from_data(topic, await self.namesrv.topic_route_data(topic))
            except NoRouteError:
                if not allow_default:
                    raise
                route = await self._default_route(topic)
            self._install(route)
            return route

    async def _default_route(self, topic: str) -> TopicRoute:
        """RocketMQ's TBW102 path, then every master of the cluster (see the module docstring)."""
        try:
            template = route_from_data(
                topic,
                default_route_data(await self.namesrv.topic_route_data(DEFAULT_TOPIC), self.default_topic_queue_nums),
            )
        except NoRouteError:
            template = None
        if template is not None and template.publish_queues:
            return TopicRoute(topic, template.publish_queues, [], template.broker_addrs, is_default=True)
        info = await self.namesrv.cluster_info()
        addrs = {name: bd["brokerAddrs"] for name, bd in info["brokerAddrTable"].items()}
        masters = sorted(name for name, ids in addrs.items() if MASTER_ID in ids)
        if not masters:
            raise NoRouteError(topic, "the topic does not exist and no master broker is registered")
        queues = [MessageQueue(topic, b, i) for b in masters for i in range(self.default_topic_queue_nums)]
        return TopicRoute(topic, queues, [], {b: addrs[b] for b in masters}, is_default=True)

    def _install(self, route: TopicRoute) -> None:
        old = self._routes.get(route.topic)
        if old is not None:
            route.version = old.version if route.same_as(old) else old.version + 1
        if old is None or route.version != old.version:
            self.stats.changes += old is not None
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()
        self._routes[route.topic] = route
        self._brokers.update(route.broker_addrs)
        live = set()
        for r in self._routes.values():
            live.update(r.broker_addrs)
        for name in [n for n in self._brokers if n not in live]:
            del self._brokers[name]
        # A group present in this route replaces its entry: addresses the nameserver dropped disappear.
        for name, ids in route.broker_addrs.items():
            self._brokers[name] = ids

    def refresh_soon(self, topic: str) -> None:
        """Re-read ``topic``'s route in the background: one refresh in flight per topic, the next no sooner than
        ``min_refresh_interval_s`` after the last; never once stopped, so no task outlives ``stop``."""
        if self._stopped:
            return
        if topic in self._refreshing or (
            time.monotonic() - self._last_refresh.get(topic, -self.min_refresh_interval_s) < self.min_refresh_interval_s
        ):
            self.stats.coalesced += 1
            return
        self.stats.on_demand += 1
        route = self._routes.get(topic)
        allow_default = route is not None and route.is_default

        async def run() -> None:
            try:
                await self.refresh(topic, allow_default=allow_default)
            except Exception as exc:
                log.warning("route refresh of %s failed: %s", topic, exc)
            finally:
                self._refreshing.pop(topic, None)

        self._refreshing[topic] = asyncio.get_running_loop().create_task(run(), name=f"route-cache.{topic}")

    async def wait_for_master(self, topic: str, broker_name: str, not_addr: str | None, timeout_s: float) -> str | None:
        """The master address of ``broker_name`` once the route names one other than ``not_addr`` (the master that
        just failed), or None after ``timeout_s``. A controller-mode failover shows here as soon as the new master
        registered."""

        def found() -> str | None:
            addr = self.find_broker_address_in_publish(broker_name)
            return addr if addr is not None and addr != not_addr else None

        return await self._wait(topic, found, timeout_s)

    async def wait_writable(self, topic: str, timeout_s: float) -> TopicRoute | None:
        """``topic``'s route once it has a writable queue on a master, or None after ``timeout_s``: a group between
        a dead master and its successor has none."""

        def found() -> TopicRoute | None:
            route = self._routes.get(topic)
            return route if route is not None and route.publish_queues else None

        return await self._wait(topic, found, timeout_s)

    async def _wait(self, topic: str, found: Callable[[], T | None], timeout_s: float) -> T | None:
        """``found()`` once it is not None, re-reading ``topic``'s route meanwhile within ``refresh_soon``'s bounds
        and re-checking after every route change; None after ``timeout_s`` or once stopped."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = found()
            left = deadline - time.monotonic()
            if value is not None or left <= 0 or self._stopped:
                return value
            self.refresh_soon(topic)
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), min(left, self.min_refresh_interval_s))
            except TimeoutError:
                pass

    # addresses ------------------------------------------------------------------------------------------
    def broker_addrs(self, broker_name: str) -> dict[int, str]:
        return self._brokers.get(broker_name, {})

    def addrs_of(self, topics: Iterable[str], *, masters_only: bool = False) -> set[str]:
        """Every node (or every master) of the groups in the cached routes of ``topics``: where heartbeats go."""
        addrs: set[str] = set()
        for topic in topics:
            route = self._routes.get(topic)
            if route is None:
                continue
            for ids in route.broker_addrs.values():
                if not masters_only:
                    addrs.update(ids.values())
                elif MASTER_ID in ids:
                    addrs.add(ids[MASTER_ID])
        return addrs

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        return self._brokers.get(broker_name, {}).get(MASTER_ID)

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int, only_this_broker: bool = False
    ) -> tuple[str, bool] | None:
        """(address, is_slave) for ``broker_name``/``broker_id`` with spec §5.4's fallbacks, or None."""
        addrs = self._brokers.get(broker_name)
        if not addrs:
            return None
        chosen = pick_broker_id(addrs, broker_id, only_this_broker)
        if chosen is None:
            return None
        if not only_this_broker and not self.health.healthy(addrs[chosen]):
            alternatives = [i for i in sorted(addrs) if i != chosen and self.health.healthy(addrs[i])]
            if alternatives:
                chosen = alternatives[0]
        return addrs[chosen], chosen != MASTER_ID

    def find_any_address(self, broker_name: str) -> str | None:
        """A healthy address of the group, the master first (for requests any node can answer)."""
        found = self.find_broker_address_in_subscribe(broker_name, MASTER_ID)
        return found[0] if found else None


def pick_broker_id(addrs: dict[int, str], broker_id: int, only_this_broker: bool) -> int | None:
    """Pure: RocketMQ's findBrokerAddressInSubscribe choice of id (spec §5.4), ignoring health."""
    if broker_id in addrs:
        return broker_id
    if only_this_broker:
        return None
    if broker_id != MASTER_ID and broker_id + 1 in addrs:
        return broker_id + 1
    return min(addrs) if addrs else None
