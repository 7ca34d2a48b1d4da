"""A blocking remoting client for Spark's processes: routes, queue offsets, pulls and sends.

Why not the asyncio SDK: Spark calls the connector synchronously (``read()`` is a generator pulled by the worker,
``latestOffset()`` an RPC from the JVM), in processes forked from ``pyspark.daemon``. So each process gets one
``SyncClient``: a ``remoting.client.RemotingClient`` (one connection per broker, many requests in flight, answers
matched by opaque) on an event loop that runs in one daemon thread of its own. Callers block on
``call()``, or start requests with ``submit()`` and collect them later with ``wait()`` (a read prefetches the
next pull while it decodes the last one; the sink keeps several sends in flight). The pure parts of the SDK are
reused: ``route_from_data`` / ``MASTER_ID`` (RocketMQ's route rules) over ``remoting.topic_route``'s reader and the
nameserver address parsing.

Fork and pickling safety: nothing here is created at import time. ``client_for(namesrv)`` keeps one client per
(process id, nameserver list); a forked child sees another pid and opens its own thread and connections (the
parent's are left alone, never used or closed by the child). Readers, writers and partitions only carry option
values, never a client.

Health: an address that just failed at transport level is avoided for ``AVOID_S`` (like the SDK's
HealthTracker), so reads move to the slave when the master dies and back when it answers again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Mapping

from client.namesrv import parse_namesrv_addr
from client.route_cache import MASTER_ID, TopicRoute, route_from_data
from connectors.spark.errors import BrokerRefusal, Unavailable
from connectors.spark.options import Tls
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand
from remoting.headers import parse_int
from remoting.topic_route import RouteDataError, read_topic_route

log = logging.getLogger("pyrmq.spark")

AVOID_S = 5.0
ROUTE_MAX_AGE_S = 15.0
CONNECT_TIMEOUT_S = 3.0
# Grace beyond a request's own timeout before a blocked caller gives up on the loop thread itself.
WAIT_SLACK_S = CONNECT_TIMEOUT_S + 2.0

Future = concurrent.futures.Future


NO_TLS = Tls()


class TransportError(Exception):
    """One request failed at transport level (refused, reset, no answer in time)."""

    def __init__(self, addr: str, detail: str) -> None:
        super().__init__(f"{addr}: {detail}")
        self.addr = addr
        self.detail = detail


class SyncClient:
    def __init__(self, namesrv: str, timeout_s: float = 10.0, tls: Tls = NO_TLS) -> None:
        self.namesrv_addrs = parse_namesrv_addr(namesrv)
        self.timeout_s = timeout_s
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._failed_until: dict[str, float] = {}
        self._ns_index = 0
        self._loop = asyncio.new_event_loop()
        self._remoting = RemotingClient(connect_timeout_s=CONNECT_TIMEOUT_S, name="pyrmq-spark",
                                        ssl=tls.context())
        self._thread = threading.Thread(target=self._loop.run_forever, name="pyrmq-spark-remoting", daemon=True)
        self._thread.start()

    # requests and health ----------------------------------------------------------------------------------
    def healthy(self, addr: str) -> bool:
        return time.monotonic() >= self._failed_until.get(addr, 0.0)

    def mark_failed(self, addr: str) -> None:
        self._failed_until[addr] = time.monotonic() + AVOID_S

    def mark_ok(self, addr: str) -> None:
        self._failed_until.pop(addr, None)

    def submit(
        self,
        addr: str,
        code: int,
        ext: Mapping[str, str] | None = None,
        body: bytes = b"",
        timeout_s: float | None = None,
    ) -> Future:
        """Start one request on the loop thread; collect it with ``wait(addr, future)`` (or cancel it)."""
        cmd = RemotingCommand(code, ext=dict(ext) if ext is not None else None, body=body)
        coro = self._remoting.invoke(addr, cmd, timeout_s or self.timeout_s)
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        future.timeout_s = timeout_s or self.timeout_s  # type: ignore[attr-defined]
        return future

    def wait(self, addr: str, future: Future) -> RemotingCommand:
        """The response of a submitted request, whatever its code; TransportError when none came."""
        try:
            response = future.result(getattr(future, "timeout_s", self.timeout_s) + WAIT_SLACK_S)
        except RemotingError as exc:
            self.mark_failed(addr)
            raise TransportError(addr, exc.detail) from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            self.mark_failed(addr)
            raise TransportError(addr, "the request got no answer and the client loop did not time it out") from None
        self.mark_ok(addr)
        return response

    def call(
        self,
        addr: str,
        code: int,
        ext: Mapping[str, str] | None = None,
        body: bytes = b"",
        timeout_s: float | None = None,
    ) -> RemotingCommand:
        """One blocking request; the response whatever its code, TransportError when none came."""
        return self.wait(addr, self.submit(addr, code, ext, body, timeout_s))

    def close(self) -> None:
        if not self._loop.is_running():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._remoting.close(), self._loop).result(WAIT_SLACK_S)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT_SLACK_S)
        if not self._thread.is_alive():
            self._loop.close()  # its selector and self-pipe

    # routes -----------------------------------------------------------------------------------------------
    def route(self, topic: str, *, max_age_s: float = ROUTE_MAX_AGE_S) -> TopicRoute:
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < max_age_s:
            return cached[1]
        last = ""
        for _ in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[self._ns_index % len(self.namesrv_addrs)]
            try:
                resp = self.call(addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            except TransportError as exc:
                last = str(exc)
                self._ns_index += 1
                continue
            if resp.code != ResponseCode.SUCCESS:
                if cached is not None:  # keep reading with the old route; the nameserver may be restarting
                    return cached[1]
                raise BrokerRefusal(f"route of topic {topic}", addr, resp.code, resp.remark or "")
            try:
                route = route_from_data(topic, read_topic_route(resp.body_bytes()))
            except RouteDataError as exc:
                raise BrokerRefusal(
                    f"route of topic {topic}", addr, ResponseCode.SYSTEM_ERROR, f"unreadable route body: {exc}"
                ) from None
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
        """(min, max) of every readable queue of ``topic`` (GET_MIN_OFFSET / GET_MAX_OFFSET, all in flight at
        once), asked of the master, else of a slave. A queue whose group has no node answering is left out (the
        caller keeps its offset unchanged)."""
        route = self.route(topic)
        pending: dict = {}
        for mq in route.subscribe_queues:
            addrs = route.broker_addrs.get(mq.broker_name, {})
            candidates = [addrs[i] for i in sorted(addrs, key=lambda i: (not self.healthy(addrs[i]), i))]
            if candidates:
                pending[mq] = (candidates, 0, self._offsets_futures(candidates[0], topic, mq.queue_id))
        out: dict[tuple[str, int], tuple[int, int]] = {}
        while pending:
            mq, (candidates, i, (low, high)) = pending.popitem()
            try:
                answers = [self.wait(candidates[i], low), self.wait(candidates[i], high)]
            except TransportError:
                if i + 1 < len(candidates):
                    pending[mq] = (candidates, i + 1, self._offsets_futures(candidates[i + 1], topic, mq.queue_id))
                else:
                    log.warning("no node of %s answered GET_MIN/MAX_OFFSET for %s", mq.broker_name, mq)
                continue
            bad = next((a for a in answers if a.code != ResponseCode.SUCCESS), None)
            if bad is None:
                out[(mq.broker_name, mq.queue_id)] = (
                    header_long(answers[0], "offset"),
                    header_long(answers[1], "offset"),
                )
            else:
                log.warning("GET_MIN/MAX_OFFSET %s on %s: code %s %s", mq, candidates[i], bad.code, bad.remark)
        return out

    def _offsets_futures(self, addr: str, topic: str, queue_id: int) -> tuple[Future, Future]:
        ext = {"topic": topic, "queueId": str(queue_id)}
        return self.submit(addr, RequestCode.GET_MIN_OFFSET, ext), self.submit(addr, RequestCode.GET_MAX_OFFSET, ext)

    def commit_offset(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET on the master, else a slave (it syncs back); failures are logged, not raised."""
        addrs = self.route(topic).broker_addrs.get(broker_name, {})
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
        for bid in sorted(addrs, key=lambda i: (not self.healthy(addrs[i]), i)):
            try:
                ack = self.call(addrs[bid], RequestCode.UPDATE_CONSUMER_OFFSET, ext)
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


def header_long(response: RemotingCommand, name: str, default: int = 0) -> int:
    """A long from the answer's header fields; ``default`` when it is absent (error answers carry none)."""
    value = (response.ext or {}).get(name)
    if value is None:
        return default
    try:
        return parse_int(value)
    except ValueError:
        return default


_CLIENTS: dict[tuple[int, str, Tls], SyncClient] = {}
_CLIENTS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _CLIENTS_LOCK
    _CLIENTS_LOCK = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def client_for(namesrv: str, timeout_s: float = 10.0, tls: Tls = NO_TLS) -> SyncClient:
    """This process's client for ``namesrv`` (created on first use, after any fork), with ``tls`` (the options'
    ``tls``/``tlsCa``)."""
    key = (os.getpid(), namesrv, tls)
    client = _CLIENTS.get(key)
    if client is None:
        with _CLIENTS_LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                for stale in [k for k in _CLIENTS if k[0] != key[0]]:  # inherited from a parent: never use, never close
                    del _CLIENTS[stale]
                client = _CLIENTS[key] = SyncClient(namesrv, timeout_s, tls)
    return client
