"""Topic routes from the nameservers, and the address choices of RocketMQ's MQClientInstance.

Routes of every topic the client used are re-read every ``poll_interval_s`` (30 s, RocketMQ's
pollNameServerInterval) and on demand after a failure (``refresh_soon``, at most once a second per topic).
From a route (spec §2.7):

- publish queues: ``write_queue_nums`` queues of every writable QueueData whose BrokerData has a master (id 0);
- subscribe queues: ``read_queue_nums`` queues of every readable QueueData.

``find_broker_address_in_subscribe`` follows spec §5.4 (exact id; id+1 for slave ids; else the lowest id) and
then the HealthTracker: an address that just failed at transport level is skipped in favour of a healthy
sibling of the same group, so consumers move to the slave when the master dies without waiting for the
nameserver's expiry, and move back when the master answers again. ``find_broker_address_in_publish`` is the
master (id 0) only.

A topic the nameserver does not know (TOPIC_NOT_EXIST) can get a *default route* (RocketMQ's TBW102 path):
``default_topic_queue_nums`` queues on every master of the cluster, so the first send lets a broker with
autoCreateTopicEnable create the topic. Such a route is re-read every few seconds until the real one appears.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from client.errors import NoRouteError
from client.message import MessageQueue
from client.namesrv import NamesrvClient
from client.rpc import HealthTracker
from remoting.codes import ResponseCode, describe

log = logging.getLogger(__name__)

PERM_READ = 4
PERM_WRITE = 2
MASTER_ID = 0
DEFAULT_ROUTE_POLL_S = 3.0


@dataclass(slots=True)
class TopicRoute:
    topic: str
    publish_queues: list[MessageQueue]
    subscribe_queues: list[MessageQueue]
    broker_addrs: dict[str, dict[int, str]]  # brokerName -> {brokerId: addr}
    is_default: bool = False  # built from the cluster's masters because the topic does not exist yet
    fetched_at: float = field(default_factory=time.monotonic)


def build_route(topic: str, queue_datas, broker_datas) -> TopicRoute:
    """Pure: a TopicRoute from the nameserver's QueueData and BrokerData lists."""
    addrs = {bd.broker_name: {int(k): v for k, v in bd.broker_addrs.items()} for bd in broker_datas}
    publish: list[MessageQueue] = []
    subscribe: list[MessageQueue] = []
    for qd in sorted(queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and MASTER_ID in addrs.get(qd.broker_name, {}):
            publish.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
        if qd.perm & PERM_READ:
            subscribe.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return TopicRoute(topic, publish, subscribe, addrs)


class RouteCache:
    def __init__(
        self,
        namesrv: NamesrvClient,
        health: HealthTracker,
        *,
        poll_interval_s: float = 30.0,
        default_topic_queue_nums: int = 4,
    ) -> None:
        self.namesrv = namesrv
        self.health = health
        self.poll_interval_s = poll_interval_s
        self.default_topic_queue_nums = default_topic_queue_nums
        self._routes: dict[str, TopicRoute] = {}
        self._brokers: dict[str, dict[int, str]] = {}
        self._refreshing: dict[str, asyncio.Task] = {}
        self._last_refresh: dict[str, float] = {}
        self._poll_task: asyncio.Task | None = None
        self._locks: dict[str, asyncio.Lock] = {}

    # lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._poll_task is None:
            self._poll_task = asyncio.get_running_loop().create_task(self._poll_loop(), name="route-cache.poll")

    async def stop(self) -> None:
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
        lock = self._locks.setdefault(topic, asyncio.Lock())
        async with lock:
            self._last_refresh[topic] = time.monotonic()
            resp = await self.namesrv.route(topic)
            if resp.code == ResponseCode.SUCCESS:
                route = build_route(topic, resp.route.queue_datas, resp.route.broker_datas)
            elif resp.code == ResponseCode.TOPIC_NOT_EXIST and allow_default:
                route = await self._default_route(topic)
            elif resp.code == ResponseCode.TOPIC_NOT_EXIST:
                raise NoRouteError(topic, resp.remark or "the nameserver has no route for it")
            else:
                raise NoRouteError(topic, f"nameserver answered {describe(resp.code)}: {resp.remark}")
            self._install(route)
            return route

    async def _default_route(self, topic: str) -> TopicRoute:
        info = await self.namesrv.cluster_info()
        if info.code != ResponseCode.SUCCESS:
            raise NoRouteError(topic, f"cluster info failed: {describe(info.code)}: {info.remark}")
        addrs = {
            name: {int(k): v for k, v in bd.broker_addrs.items()} for name, bd in info.broker_addr_table.items()
        }
        masters = sorted(name for name, ids in addrs.items() if MASTER_ID in ids)
        if not masters:
            raise NoRouteError(topic, "the topic does not exist and no master broker is registered")
        queues = [MessageQueue(topic, b, i) for b in masters for i in range(self.default_topic_queue_nums)]
        return TopicRoute(topic, queues, [], {b: addrs[b] for b in masters}, is_default=True)

    def _install(self, route: TopicRoute) -> None:
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
        """Re-read ``topic``'s route in the background (at most once a second)."""
        if topic in self._refreshing or time.monotonic() - self._last_refresh.get(topic, 0.0) < 1.0:
            return
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

    # addresses ------------------------------------------------------------------------------------------
    def broker_addrs(self, broker_name: str) -> dict[int, str]:
        return self._brokers.get(broker_name, {})

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
