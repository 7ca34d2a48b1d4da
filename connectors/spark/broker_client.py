"""A small blocking gRPC client for Spark's processes: routes, queue offsets, pulls and sends.

Why not the asyncio SDK: Spark calls the connector synchronously (``read()`` is a generator pulled by the worker,
``latestOffset()`` an RPC from the JVM), in processes forked from ``pyspark.daemon``. Blocking stubs need no
event loop per process and no thread. The pure parts of the SDK are reused: ``build_route`` / ``pick_broker_id``
(RocketMQ's address choices) and the nameserver address parsing.

Fork and pickling safety: nothing here is created at import time. ``client_for(namesrv)`` keeps one client per
(process id, nameserver list); a forked child sees another pid and opens its own channels. Readers, writers
and partitions only carry option values, never a client.

Health: an address that just failed at transport level is avoided for ``AVOID_S`` (like the SDK's
HealthTracker), so reads move to the slave when the master dies and back when it answers again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from client.namesrv import parse_namesrv_addr
from client.route_cache import MASTER_ID, TopicRoute, build_route
from connectors.spark.errors import BrokerRefusal, Unavailable
from remoting.channel import CHANNEL_OPTIONS
from remoting.codes import ResponseCode
from remoting.pb import broker_pb2, broker_pb2_grpc, namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger("pyrmq.spark")

AVOID_S = 5.0
ROUTE_MAX_AGE_S = 15.0


class TransportError(Exception):
    """One RPC failed at transport level (refused, reset, deadline)."""

    def __init__(self, addr: str, exc: grpc.RpcError) -> None:
        code = exc.code() if hasattr(exc, "code") else None
        super().__init__(
            f"{addr}: {code.name if code else 'UNKNOWN'} {exc.details() if hasattr(exc, 'details') else ''}"
        )
        self.addr = addr


class SyncClient:
    def __init__(self, namesrv: str, timeout_s: float = 10.0) -> None:
        self.namesrv_addrs = parse_namesrv_addr(namesrv)
        self.timeout_s = timeout_s
        self._channels: dict[str, grpc.Channel] = {}
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._failed_until: dict[str, float] = {}
        self._ns_index = 0
        self._lock = threading.Lock()

    # channels and health ----------------------------------------------------------------------------------
    def channel(self, addr: str) -> grpc.Channel:
        ch = self._channels.get(addr)
        if ch is None:
            with self._lock:
                ch = self._channels.get(addr)
                if ch is None:
                    ch = self._channels[addr] = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
        return ch

    def messaging(self, addr: str) -> broker_pb2_grpc.MessagingStub:
        return broker_pb2_grpc.MessagingStub(self.channel(addr))

    def healthy(self, addr: str) -> bool:
        return time.monotonic() >= self._failed_until.get(addr, 0.0)

    def mark_failed(self, addr: str) -> None:
        self._failed_until[addr] = time.monotonic() + AVOID_S

    def mark_ok(self, addr: str) -> None:
        self._failed_until.pop(addr, None)

    def call(self, addr: str, method: Callable[..., Any], request: Any, timeout_s: float | None = None) -> Any:
        try:
            response = method(request, timeout=timeout_s or self.timeout_s)
        except grpc.RpcError as exc:
            self.mark_failed(addr)
            raise TransportError(addr, exc) from None
        self.mark_ok(addr)
        return response

    def wait(self, addr: str, future: Any) -> Any:
        """The result of an RPC started with ``.future()``; transport failures as in ``call()``."""
        try:
            response = future.result()
        except grpc.RpcError as exc:
            self.mark_failed(addr)
            raise TransportError(addr, exc) from None
        self.mark_ok(addr)
        return response

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()

    # routes -----------------------------------------------------------------------------------------------
    def route(self, topic: str, *, max_age_s: float = ROUTE_MAX_AGE_S) -> TopicRoute:
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < max_age_s:
            return cached[1]
        last = ""
        for _ in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[self._ns_index % len(self.namesrv_addrs)]
            stub = namesrv_pb2_grpc.NameServerStub(self.channel(addr))
            try:
                resp = stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                last = str(TransportError(addr, exc))
                self._ns_index += 1
                continue
            if resp.code != ResponseCode.SUCCESS:
                if cached is not None:  # keep reading with the old route; the nameserver may be restarting
                    return cached[1]
                raise BrokerRefusal(f"route of topic {topic}", addr, resp.code, resp.remark)
            route = build_route(topic, resp.route.queue_datas, resp.route.broker_datas)
            self._routes[topic] = (time.monotonic(), route)
            return route
        if cached is not None:
            log.warning("no nameserver answered (%s); using the route of %s fetched earlier", last, topic)
            return cached[1]
        raise Unavailable(
            f"route of topic {topic}",
            f"no nameserver answered at {';'.join(self.namesrv_addrs)}: {last}",
            self.timeout_s,
        )

    # queue offsets ----------------------------------------------------------------------------------------
    def live_offsets(self, topic: str) -> dict[tuple[str, int], tuple[int, int]]:
        """(min, max) of every readable queue of ``topic``, asked of the master, else of a slave, in parallel.
        A queue whose group has no node answering is left out (the caller keeps its offset unchanged)."""
        route = self.route(topic)
        pending = []
        for mq in route.subscribe_queues:
            addrs = route.broker_addrs.get(mq.broker_name, {})
            order = sorted(addrs, key=lambda i: (not self.healthy(addrs[i]), i))
            pending.append((mq, [addrs[i] for i in order]))
        out: dict[tuple[str, int], tuple[int, int]] = {}
        futures = {}
        for mq, candidates in pending:
            if candidates:
                futures[mq] = (candidates, 0, self._offsets_future(candidates[0], topic, mq.queue_id))
        while futures:
            mq, (candidates, i, fut) = futures.popitem()
            try:
                resp = fut.result()
                self.mark_ok(candidates[i])
            except grpc.RpcError:
                self.mark_failed(candidates[i])
                if i + 1 < len(candidates):
                    futures[mq] = (candidates, i + 1, self._offsets_future(candidates[i + 1], topic, mq.queue_id))
                else:
                    log.warning("no node of %s answered GetQueueOffsets for %s", mq.broker_name, mq)
                continue
            if resp.code == ResponseCode.SUCCESS:
                out[(mq.broker_name, mq.queue_id)] = (resp.min_offset, resp.max_offset)
            else:
                log.warning("GetQueueOffsets %s on %s: code %s %s", mq, candidates[i], resp.code, resp.remark)
        return out

    def _offsets_future(self, addr: str, topic: str, queue_id: int):
        req = broker_pb2.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id)
        return self.messaging(addr).GetQueueOffsets.future(req, timeout=self.timeout_s)

    def commit_offset(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int) -> None:
        """UpdateConsumerOffset on the master, else a slave (it syncs back); failures are logged, not raised."""
        addrs = self.route(topic).broker_addrs.get(broker_name, {})
        req = broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
        )
        for bid in sorted(addrs, key=lambda i: (not self.healthy(addrs[i]), i)):
            try:
                ack = self.call(addrs[bid], self.messaging(addrs[bid]).UpdateConsumerOffset, req)
            except TransportError:
                continue
            if ack.code == ResponseCode.SUCCESS:
                return
            log.warning("committing %s %s:%d=%d on %s: %s", group, topic, queue_id, offset, addrs[bid], ack.remark)
        log.warning(
            "could not commit offset %d of %s %s:%d under group %s", offset, topic, broker_name, queue_id, group
        )

    def master_addr(self, topic: str, broker_name: str) -> str | None:
        return self.route(topic).broker_addrs.get(broker_name, {}).get(MASTER_ID)


_CLIENTS: dict[tuple[int, str], SyncClient] = {}


def client_for(namesrv: str, timeout_s: float = 10.0) -> SyncClient:
    """This process's client for ``namesrv`` (created on first use, after any fork)."""
    key = (os.getpid(), namesrv)
    client = _CLIENTS.get(key)
    if client is None:
        for stale in [k for k in _CLIENTS if k[0] != key[0]]:  # inherited from a parent: never use, never close
            del _CLIENTS[stale]
        client = _CLIENTS[key] = SyncClient(namesrv, timeout_s)
    return client
