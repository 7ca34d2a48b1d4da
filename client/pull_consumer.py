"""PullConsumer: the application chooses queues and offsets; the client picks the node and keeps offsets.

It follows the brokers' read advice per queue (``pullFromWhichNodeTable``, see client/pull_api.py) and commits
offsets to the master while it is reachable, else to the slave (client/offset_store.py).

Like RocketMQ's DefaultMQPullConsumer it heartbeats (CONSUME_ACTIVELY, ``*`` on every topic it used) to every
node of those topics' groups, when it first uses a topic and every ``heartbeat_interval_s``, so brokers and
``mqctl consumerProgress`` see it, and unregisters when it stops. Its pulls carry their subscription, so no
broker depends on the heartbeat to serve them. A SQL92 selector is checked with CHECK_CLIENT_CONFIG on the
queue's master before its first pull there, as Java's client checks at start.
"""

from __future__ import annotations

import asyncio
import ssl
import time

from client.errors import ClientStateError
from client.heartbeat import check_client_config, consumer_heartbeat_body, new_client_id, send_heartbeats, unregister
from client.lifecycle import Lifecycle
from client.message import MessageQueue
from client.namesrv import NamesrvClient
from client.offset_store import RemoteBrokerOffsetStore
from client.pull_api import PullAPI, PullResult, PullStatus
from client.route_cache import RouteCache
from client.rpc import ClientRemoting
from client.selector import MessageSelector, Selector, as_selector
from common.service import Service

__all__ = ["MessageSelector", "PullConsumer", "PullResult", "PullStatus"]

MAX_CHECKED = 1024  # (broker, topic, selector) triples remembered as checked


class PullConsumer(Lifecycle):
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        avoid_failed_broker_s: float = 5.0,
        poll_name_server_interval_s: float = 30.0,
        request_timeout_s: float = 5.0,
        heartbeat_interval_s: float = 30.0,
        instance_name: str | None = None,
        credentials: tuple[str, str] | None = None,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str = "",
    ) -> None:
        self.group = group
        self.client_id = new_client_id(instance_name)
        self.request_timeout_s = request_timeout_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.sub_version = int(time.time() * 1000)
        self.remoting = ClientRemoting(avoid_failed_s=avoid_failed_broker_s, name=f"pull-consumer.{group}",
                                      credentials=credentials,
                                      tls=tls, tls_ca=tls_ca)
        self.namesrv = NamesrvClient(namesrv_addr, remoting=self.remoting, timeout_s=request_timeout_s)
        self.routes = RouteCache(self.namesrv, self.remoting.health, poll_interval_s=poll_name_server_interval_s)
        self.pull_api = PullAPI(group, self.routes, self.remoting, sub_version=self.sub_version)
        self.offsets = RemoteBrokerOffsetStore(group, self.routes, self.remoting, timeout_s=request_timeout_s)
        self._topics: set[str] = set()  # topics this consumer used: its heartbeat's subscriptions
        self._checked: set[tuple[str, str, MessageSelector]] = set()  # SQL92 selectors a broker accepted
        self._svc = Service(f"pull-consumer.{group}")
        self._heartbeat_task: asyncio.Task | None = None
        self._state = "created"

    async def start(self) -> PullConsumer:
        if self._state == "stopped":
            raise ClientStateError(f"pull consumer {self.group}", "stopped")
        if self._state != "started":
            self.routes.start()
            await self._svc.start()
            self._svc.run_every("heartbeat", self.heartbeat_interval_s, self._heartbeat)
            self._state = "started"
        return self

    async def stop(self) -> None:
        if not self._begin_stop():
            return
        self._state = "stopped"
        await self._svc.stop(timeout_s=1.0)
        await self.offsets.persist_all()
        await unregister(
            self.remoting,
            self._broker_addrs(),
            self.client_id,
            consumer_group=self.group,
            timeout_s=min(self.request_timeout_s, 2.0),
        )
        await self.routes.stop()
        await self.remoting.close()

    def _broker_addrs(self) -> set[str]:
        return self.routes.addrs_of(self._topics)

    async def _heartbeat(self) -> None:
        addrs = self._broker_addrs()
        if not addrs:
            return
        body = consumer_heartbeat_body(
            self.client_id,
            self.group,
            [(topic, "*") for topic in sorted(self._topics)],
            self.sub_version,
            consume_type="CONSUME_ACTIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
        )
        await send_heartbeats(self.remoting, addrs, body, self.request_timeout_s)

    async def _use(self, topic: str) -> None:
        """Make sure ``topic`` has a route; the first use of a topic is announced with a heartbeat."""
        if self.routes.cached(topic) is None:
            await self.routes.refresh(topic)
        if topic not in self._topics:
            self._topics.add(topic)
            if self._heartbeat_task is None or self._heartbeat_task.done():
                self._heartbeat_task = self._svc.spawn("heartbeat.now", self._heartbeat())

    def _check(self) -> None:
        if self._state != "started":
            raise ClientStateError(f"pull consumer {self.group}", self._state)

    async def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        self._check()
        route = await self.routes.refresh(topic)
        await self._use(topic)
        return sorted(route.subscribe_queues)

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        subscription: Selector = "*",
        *,
        sql92: str | None = None,
        timeout_s: float = 10.0,
        suspend_ms: int = 0,
    ) -> PullResult:
        """One pull of ``mq`` from ``offset``; long-polls up to ``suspend_ms`` when nothing is there yet.
        ``subscription`` is a tag expression or a ``MessageSelector``; ``sql92="a > 5"`` pulls only the messages
        whose properties match (the broker filters; the first use of an expression on a broker is checked there
        with CHECK_CLIENT_CONFIG, which raises ``BrokerError`` with the broker's reason)."""
        self._check()
        await self._use(mq.topic)
        subscription = as_selector(subscription, sql92)
        if not subscription.is_tag:
            await self._check_selector(mq, subscription)
        committed = self.offsets.get(mq) or 0
        return await self.pull_api.pull(
            mq,
            offset,
            max_nums=max_nums,
            subscription=subscription,
            timeout_s=max(timeout_s, suspend_ms / 1000.0 + 5.0) if suspend_ms else timeout_s,
            suspend_ms=suspend_ms,
            commit_offset=committed,
        )

    async def _check_selector(self, mq: MessageQueue, selector: MessageSelector) -> None:
        addr = self.routes.find_broker_address_in_subscribe(mq.broker_name, 0, False)
        if addr is None or (addr[0], mq.topic, selector) in self._checked:
            return
        await check_client_config(self.remoting, addr[0], self.client_id, self.group, mq.topic, selector,
                                  self.sub_version, self.request_timeout_s)
        if len(self._checked) >= MAX_CHECKED:
            self._checked.clear()
        self._checked.add((addr[0], mq.topic, selector))

    async def commit_offset(self, mq: MessageQueue, offset: int) -> str:
        """Commit now (master if reachable, else slave); returns the broker address that stored it."""
        self._check()
        await self._use(mq.topic)
        self.offsets.update(mq, offset)
        return await self.offsets.commit(mq, offset)

    async def query_offset(self, mq: MessageQueue) -> int:
        """The committed offset on the brokers, or -1 when none is stored."""
        self._check()
        await self._use(mq.topic)
        return await self.offsets.read(mq)
