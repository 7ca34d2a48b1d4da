"""Consumer offsets: on the brokers (clustering) or in a local file (broadcasting), RocketMQ's OffsetStore.

Both keep offsets in memory (``update``) and write them out with ``persist_all`` (every 5 s and on stop,
driven by the consumer).

RemoteBrokerOffsetStore: QUERY_CONSUMER_OFFSET (14; QUERY_NOT_FOUND 22 = nothing stored) and
UPDATE_CONSUMER_OFFSET (15), sent two-way so the store knows which node took a commit. Target (spec §6.2): the
group's master while it is in the route and reachable, else another node of the group (the slave, which accepts
and persists commits). "Reachable" uses the shared HealthTracker, so commits move to the slave as soon as the
master fails a call, not after a route refresh. ``persist_all`` skips an offset only when the node it would go
to now already took it: an offset the master took just before it died is committed again to the slave, whose
copy (synced from the master every few seconds) may be older. RocketMQ's client re-sends every offset on each
persist; this sends one commit per queue per change of node.

LocalFileOffsetStore: ``<base_dir>/<group>/offsets.json`` written atomically (common/persist.py), keys
``topic@brokerName@queueId``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from client.errors import BrokerError, BrokerNotFoundError, MQClientError
from client.message import MessageQueue
from client.route_cache import MASTER_ID, RouteCache
from client.rpc import ClientRemoting, command
from common.persist import read_json, write_json_atomic
from remoting.codes import RequestCode, ResponseCode
from remoting.headers import parse_int

log = logging.getLogger(__name__)


class _InMemoryOffsets:
    """The in-memory table both stores keep between persists (the consumer updates it as it consumes)."""

    def __init__(self) -> None:
        self._offsets: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        if increase_only and offset <= self._offsets.get(mq, -1):
            return
        self._offsets[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        return self._offsets.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        self._offsets.pop(mq, None)


class RemoteBrokerOffsetStore(_InMemoryOffsets):
    def __init__(self, group: str, routes: RouteCache, remoting: ClientRemoting, *, timeout_s: float = 5.0) -> None:
        super().__init__()
        self.group = group
        self.routes = routes
        self.remoting = remoting
        self.timeout_s = timeout_s
        self._persisted: dict[MessageQueue, tuple[str, int]] = {}  # the node that took each offset, and the offset

    def remove(self, mq: MessageQueue) -> None:
        super().remove(mq)
        self._persisted.pop(mq, None)

    # brokers ----------------------------------------------------------------------------------------------
    async def _targets(self, mq: MessageQueue) -> list[str]:
        """Addresses to try in order: the master when in the route and healthy, then a fallback node."""
        if self.routes.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, True) is None:
            await self.routes.refresh(mq.topic)
        out = self._routed_targets(mq)
        if not out:
            raise BrokerNotFoundError(mq.broker_name)
        return out

    def _routed_targets(self, mq: MessageQueue) -> list[str]:
        """``_targets`` from the cached route alone (no refresh): persist_all asks it once per queue."""
        found = self.routes.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, True)
        out: list[str] = []
        if found is not None and self.remoting.health.healthy(found[0]):
            out.append(found[0])
        fallback = self.routes.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, False)
        if fallback is not None and fallback[0] not in out:
            out.append(fallback[0])
        if found is not None and found[0] not in out:
            out.append(found[0])
        return out

    def _ext(self, mq: MessageQueue) -> dict[str, str]:
        return {"consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id)}

    async def commit(self, mq: MessageQueue, offset: int) -> str:
        """UPDATE_CONSUMER_OFFSET now; returns the address that took it."""
        ext = self._ext(mq)
        ext["commitOffset"] = str(offset)
        what = f"UPDATE_CONSUMER_OFFSET {mq}={offset}"
        last: MQClientError | None = None
        for addr in await self._targets(mq):
            try:
                resp = await self.remoting.invoke(
                    addr, command(RequestCode.UPDATE_CONSUMER_OFFSET, ext), self.timeout_s, what
                )
            except MQClientError as exc:  # transport failure: the next node
                last = exc
                continue
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError(resp.code, resp.remark or "", addr, request=what,
                                  request_code=RequestCode.UPDATE_CONSUMER_OFFSET)
            self._persisted[mq] = (addr, offset)
            return addr
        assert last is not None
        raise last

    async def read(self, mq: MessageQueue) -> int:
        """QUERY_CONSUMER_OFFSET: the stored offset, or -1 when the broker has none (QUERY_NOT_FOUND)."""
        what = f"QUERY_CONSUMER_OFFSET {mq}"
        last: MQClientError | None = None
        for addr in await self._targets(mq):
            try:
                resp = await self.remoting.invoke(
                    addr, command(RequestCode.QUERY_CONSUMER_OFFSET, self._ext(mq)), self.timeout_s, what
                )
            except MQClientError as exc:
                last = exc
                continue
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                return -1
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError(resp.code, resp.remark or "", addr, request=what,
                                  request_code=RequestCode.QUERY_CONSUMER_OFFSET)
            try:
                return parse_int((resp.ext or {})["offset"], what="offset")
            except (KeyError, ValueError):
                raise MQClientError(f"{what}: {addr} answered SUCCESS without a numeric offset header") from None
        assert last is not None
        raise last

    async def persist(self, mq: MessageQueue) -> None:
        offset = self._offsets.get(mq)
        if offset is not None and offset >= 0:
            await self.commit(mq, offset)

    async def persist_all(self, mqs: list[MessageQueue] | None = None) -> int:
        """Commit each offset (of ``mqs`` if given) that the node it would go to now has not taken yet; failures are
        logged. Returns the commits made."""
        todo = []
        for mq, off in list(self._offsets.items()):
            if (mqs is not None and mq not in mqs) or off < 0:
                continue
            took = self._persisted.get(mq)
            if took is not None and took[1] == off and took[0] == next(iter(self._routed_targets(mq)), None):
                continue  # the node a commit would go to now has it
            todo.append((mq, off))
        if not todo:
            return 0
        results = await asyncio.gather(*(self.commit(mq, off) for mq, off in todo), return_exceptions=True)
        done = 0
        for (mq, off), res in zip(todo, results, strict=True):
            if isinstance(res, BaseException):
                log.warning("offset commit %s=%d failed: %s", mq, off, res)
            else:
                done += 1
        return done


class LocalFileOffsetStore(_InMemoryOffsets):
    """Broadcasting offsets in ``<base_dir>/<group>/offsets.json``."""

    def __init__(self, group: str, base_dir: str | Path) -> None:
        super().__init__()
        self.group = group
        self.path = Path(base_dir) / group / "offsets.json"
        self._loaded: dict[str, int] | None = None

    @staticmethod
    def _key(mq: MessageQueue) -> str:
        return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"

    async def read(self, mq: MessageQueue) -> int:
        if self._loaded is None:
            data = await asyncio.to_thread(read_json, self.path, {})
            table = data.get("offsetTable", {}) if data else {}
            self._loaded = {str(k): parse_int(v, what=f"{self.path} {k}") for k, v in table.items()}
        return self._loaded.get(self._key(mq), -1)

    async def commit(self, mq: MessageQueue, offset: int) -> str:
        self._offsets[mq] = offset
        await self.persist_all()
        return str(self.path)

    async def persist_all(self, mqs: list[MessageQueue] | None = None) -> int:
        if not self._offsets:
            return 0
        table = dict(self._loaded or {})
        table.update({self._key(mq): off for mq, off in self._offsets.items() if off >= 0})
        self._loaded = table
        await asyncio.to_thread(write_json_atomic, self.path, {"offsetTable": table})
        return len(self._offsets)
