"""PullConsumer: the application chooses queues and offsets; the client picks the node and keeps offsets.

It follows the brokers' read advice per queue (``pullFromWhichNodeTable``, see client/pull_api.py) and commits
offsets to the master while it is reachable, else to the slave (client/offset_store.py).
"""

from __future__ import annotations

import time
from typing import Self

from client.errors import ClientStateError
from client.message import MessageQueue
from client.namesrv import NamesrvClient
from client.offset_store import RemoteBrokerOffsetStore
from client.pull_api import PullAPI, PullResult, PullStatus
from client.route_cache import RouteCache
from client.rpc import ClientRemoting

__all__ = ["PullConsumer", "PullResult", "PullStatus"]


class PullConsumer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        avoid_failed_broker_s: float = 5.0,
        poll_name_server_interval_s: float = 30.0,
        request_timeout_s: float = 5.0,
    ) -> None:
        self.group = group
        self.remoting = ClientRemoting(avoid_failed_s=avoid_failed_broker_s, name=f"pull-consumer.{group}")
        self.namesrv = NamesrvClient(namesrv_addr, remoting=self.remoting, timeout_s=request_timeout_s)
        self.routes = RouteCache(self.namesrv, self.remoting.health, poll_interval_s=poll_name_server_interval_s)
        self.pull_api = PullAPI(group, self.routes, self.remoting, sub_version=int(time.time() * 1000))
        self.offsets = RemoteBrokerOffsetStore(group, self.routes, self.remoting, timeout_s=request_timeout_s)
        self._state = "created"

    async def start(self) -> PullConsumer:
        if self._state == "stopped":
            raise ClientStateError(f"pull consumer {self.group}", "stopped")
        if self._state != "started":
            self.routes.start()
            self._state = "started"
        return self

    async def stop(self) -> None:
        if self._state != "started":
            self._state = "stopped"
            return
        self._state = "stopped"
        await self.offsets.persist_all()
        await self.routes.stop()
        await self.remoting.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _check(self) -> None:
        if self._state != "started":
            raise ClientStateError(f"pull consumer {self.group}", self._state)

    async def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        self._check()
        route = await self.routes.refresh(topic)
        return sorted(route.subscribe_queues)

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        subscription: str = "*",
        *,
        timeout_s: float = 10.0,
        suspend_ms: int = 0,
    ) -> PullResult:
        """One pull of ``mq`` from ``offset``; long-polls up to ``suspend_ms`` when nothing is there yet."""
        self._check()
        if self.routes.cached(mq.topic) is None:
            await self.routes.refresh(mq.topic)
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

    async def commit_offset(self, mq: MessageQueue, offset: int) -> str:
        """Commit now (master if reachable, else slave); returns the broker address that stored it."""
        self._check()
        if self.routes.cached(mq.topic) is None:
            await self.routes.refresh(mq.topic)
        self.offsets.update(mq, offset)
        return await self.offsets.commit(mq, offset)

    async def query_offset(self, mq: MessageQueue) -> int:
        """The committed offset on the brokers, or -1 when none is stored."""
        self._check()
        if self.routes.cached(mq.topic) is None:
            await self.routes.refresh(mq.topic)
        return await self.offsets.read(mq)
