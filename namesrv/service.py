"""The nameserver's gRPC servicer: validate -> route table -> response, and the brokers' keep-alive streams.

Every answer carries ``code`` and a ``remark`` that tells the caller what to do; gRPC status codes stay for
transport failures. The servicer holds no routing logic (that is ``route_table``); it only converts messages,
reads the clock and tracks keep-alive streams.

Keep-alive: a broker holds one ``KeepAlive`` stream per nameserver. Its first message names the broker
(``broker_addr``), every message refreshes the broker's ``last_update_ms`` and gets an answer. When the stream
ends for any reason (the broker closed it, its process died and the kernel reset the connection, the call was
cancelled), the broker is dropped at once, as RocketMQ does when a broker's channel closes, instead of after the
silence expiry. A broker that reconnects opens a new stream before the old one is noticed as dead, so each
stream gets a generation number and only the newest stream of an address may drop it.

Keep-alive answers (one per request message): SUCCESS while the broker is registered; QUERY_NOT_FOUND when it is
not (this nameserver restarted or expired it: register now); SERVICE_NOT_AVAILABLE when the nameserver is stopping;
INVALID_PARAMETER, then end of stream, when the first message has no valid ``broker_addr``. Later messages are pings
for the first message's address, whatever they carry.

Task safety: everything runs on the server's event loop; the route table is only touched between awaits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc

from namesrv import route_table as rt
from remoting.codes import ResponseCode
from remoting.pb import common_pb2, namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)

OK = ResponseCode.SUCCESS
INVALID = ResponseCode.INVALID_PARAMETER


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _addr_problem(field: str, value: str, fix: str) -> str | None:
    """None when ``value`` is ``host:port``; else a remark naming the field, the value and the fix."""
    host, _, port = value.rpartition(":")
    if host and port.isdigit() and 0 < int(port) < 65536:
        return None
    return f"{field} {value!r} is not host:port: {fix}"


def _validate_register(req: namesrv_pb2.RegisterBrokerRequest) -> str | None:
    for field, value, key in (
        ("cluster_name", req.cluster_name, "brokerClusterName"),
        ("broker_name", req.broker_name, "brokerName"),
    ):
        if not value:
            return f"{field} is empty: set {key} in the broker conf"
    problem = _addr_problem("broker_addr", req.broker_addr, "set brokerIP1 and listenPort in the broker conf")
    if problem:
        return problem
    if req.broker_id < 0:
        return f"broker_id {req.broker_id} is negative: use 0 for the master and 1, 2, ... for slaves"
    if req.ha_server_addr:
        problem = _addr_problem("ha_server_addr", req.ha_server_addr, "set brokerIP2 and haListenPort")
        if problem:
            return problem
    for tc in req.topic_configs:
        if not tc.topic_name:
            return "a topic config has an empty topic_name: fix the broker's topics.json"
        if tc.read_queue_nums < 0 or tc.write_queue_nums < 0 or not 0 <= tc.perm <= 7:
            return (
                f"topic {tc.topic_name}: queue numbers must be >= 0 and perm within 0..7 "
                f"(got read={tc.read_queue_nums} write={tc.write_queue_nums} perm={tc.perm}): "
                "fix it with mqctl updateTopic"
            )
    return None


def _topic_configs(req: namesrv_pb2.RegisterBrokerRequest) -> list[rt.TopicConfig]:
    # RocketMQ's broker replaces each topic's perm by its own when it is not read-write; doing it here too is
    # idempotent and keeps a read-only broker from advertising writable queues whatever the broker sent.
    override = req.broker_permission if req.broker_permission in (rt.PERM_READ, rt.PERM_WRITE) else None
    return [
        rt.TopicConfig(
            tc.topic_name,
            tc.read_queue_nums,
            tc.write_queue_nums,
            override if override is not None else tc.perm,
            tc.topic_sys_flag,
            tc.order,
        )
        for tc in req.topic_configs
    ]


def _broker_data_pb(bd: rt.BrokerData) -> namesrv_pb2.BrokerData:
    return namesrv_pb2.BrokerData(cluster=bd.cluster, broker_name=bd.broker_name, broker_addrs=bd.broker_addrs)


class NameServerServicer(namesrv_pb2_grpc.NameServerServicer):
    def __init__(
        self,
        table: rt.RouteInfoManager,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        wall_clock_ms: Callable[[], int] = wall_ms,
        metrics=None,
    ) -> None:
        self.table = table
        self.metrics = metrics  # namesrv.metrics.NamesrvMetrics or None
        self._clock_ms = clock_ms
        self._wall_clock_ms = wall_clock_ms
        self._stream_generation: dict[str, int] = {}  # broker_addr -> generation of its newest open stream
        self._next_generation = 1
        self._closing = asyncio.Event()

    def close_streams(self) -> None:
        """Shutdown: end every keep-alive stream now and refuse new ones, so ``server.stop(grace)`` need not
        wait out its grace period for streams that never end on their own."""
        self._closing.set()

    @property
    def open_streams(self) -> int:
        return len(self._stream_generation)

    # registration --------------------------------------------------------------------------------------------
    async def RegisterBroker(self, request, context):
        problem = _validate_register(request)
        if problem:
            if self.metrics is not None:
                self.metrics.on_register(request.broker_id, ok=False)
            return namesrv_pb2.RegisterBrokerResponse(code=INVALID, remark=problem)
        dv = request.data_version
        result = self.table.register_broker(
            cluster=request.cluster_name,
            broker_name=request.broker_name,
            broker_addr=request.broker_addr,
            broker_id=request.broker_id,
            ha_server_addr=request.ha_server_addr,
            data_version=rt.DataVersion(dv.timestamp, dv.counter),
            topic_configs=_topic_configs(request),
            now_ms=self._clock_ms(),
            timeout_ms=request.heartbeat_timeout_millis,
        )
        if self.metrics is not None:
            self.metrics.on_register(request.broker_id)
        who = f"{request.broker_name} id {request.broker_id} at {request.broker_addr}"
        if request.broker_id == rt.MASTER_ID:
            remark = f"registered master {who} with {len(request.topic_configs)} topics"
        elif result.master_addr:
            remark = f"registered slave {who}; master {result.master_addr}, HA {result.ha_server_addr}"
        else:
            remark = (
                f"registered slave {who}; no master of {request.broker_name} is registered yet: "
                "its address comes with a later registration once the master is up (or set haMasterAddress)"
            )
        return namesrv_pb2.RegisterBrokerResponse(
            code=OK, remark=remark, ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )

    async def UnregisterBroker(self, request, context):
        if not request.broker_name or not request.broker_addr:
            return common_pb2.Ack(
                code=INVALID, remark="broker_name and broker_addr are required: send the ones you registered"
            )
        changed = self.table.unregister_broker(
            cluster=request.cluster_name,
            broker_name=request.broker_name,
            broker_addr=request.broker_addr,
            broker_id=request.broker_id,
        )
        if self.metrics is not None:
            self.metrics.on_unregister(changed)
        who = f"{request.broker_name} id {request.broker_id} at {request.broker_addr}"
        remark = f"unregistered {who}" if changed else f"{who} was not registered here; nothing to do"
        log.info("%s", remark)
        return common_pb2.Ack(code=OK, remark=remark)

    # queries -------------------------------------------------------------------------------------------------
    async def GetRouteInfoByTopic(self, request, context):
        if not request.topic:
            if self.metrics is not None:
                self.metrics.on_route_query("invalid")
            return namesrv_pb2.GetRouteInfoResponse(code=INVALID, remark="topic is empty: name the topic to route")
        route = self.table.pickup_topic_route(request.topic)
        if self.metrics is not None:
            self.metrics.on_route_query("not_found" if route is None else "found")
        if route is None:
            return namesrv_pb2.GetRouteInfoResponse(
                code=ResponseCode.TOPIC_NOT_EXIST,
                remark=(
                    f"topic {request.topic} has no route: create it with mqctl updateTopic "
                    "or enable autoCreateTopicEnable on a broker"
                ),
            )
        return namesrv_pb2.GetRouteInfoResponse(
            code=OK,
            remark=f"{len(route.queue_datas)} broker groups serve {request.topic}",
            route=namesrv_pb2.TopicRouteData(
                queue_datas=[
                    namesrv_pb2.QueueData(
                        broker_name=q.broker_name,
                        read_queue_nums=q.read_queue_nums,
                        write_queue_nums=q.write_queue_nums,
                        perm=q.perm,
                        topic_sys_flag=q.topic_sys_flag,
                    )
                    for q in route.queue_datas
                ],
                broker_datas=[_broker_data_pb(bd) for bd in route.broker_datas],
            ),
        )

    async def GetBrokerClusterInfo(self, request, context):
        # Live times are kept on the monotonic clock; report them as epoch ms, RocketMQ's unit.
        offset_ms = self._wall_clock_ms() - self._clock_ms()
        live = [
            namesrv_pb2.LiveBroker(
                broker_addr=b.broker_addr,
                cluster=b.cluster,
                broker_name=b.broker_name,
                broker_id=b.broker_id,
                ha_server_addr=b.info.ha_server_addr,
                last_update_timestamp=b.info.last_update_ms + offset_ms,
                data_version=common_pb2.DataVersion(
                    timestamp=b.info.data_version.timestamp, counter=b.info.data_version.counter
                ),
            )
            for b in self.table.live_brokers()
        ]
        return namesrv_pb2.GetBrokerClusterInfoResponse(
            code=OK,
            remark=f"{len(self.table.broker_addr_table)} broker groups, {len(live)} live brokers",
            broker_addr_table={n: _broker_data_pb(bd) for n, bd in self.table.broker_addr_table.items()},
            cluster_addr_table={
                c: namesrv_pb2.BrokerNames(broker_names=sorted(names))
                for c, names in self.table.cluster_addr_table.items()
            },
            live_brokers=live,
        )

    async def GetAllTopicList(self, request, context):
        topics = self.table.all_topics()
        return namesrv_pb2.GetAllTopicListResponse(code=OK, remark=f"{len(topics)} topics", topics=topics)

    # admin ---------------------------------------------------------------------------------------------------
    async def DeleteTopic(self, request, context):
        if not request.topic:
            return common_pb2.Ack(code=INVALID, remark="topic is empty: name the topic to delete")
        scope = f" in cluster {request.cluster_name}" if request.cluster_name else ""
        if self.table.delete_topic(request.topic, request.cluster_name):
            remark = f"deleted the route of {request.topic}{scope}; delete it on the brokers too or they re-register it"
            log.info("%s", remark)
        else:
            remark = f"topic {request.topic} has no route{scope} here; nothing to delete"
        return common_pb2.Ack(code=OK, remark=remark)

    async def WipeWritePerm(self, request, context):
        if not request.broker_name:
            return namesrv_pb2.WipeWritePermResponse(code=INVALID, remark="broker_name is empty: name the broker group")
        count = self.table.wipe_write_perm(request.broker_name)
        if count:
            remark = (
                f"wiped the write permission of {request.broker_name} on {count} topics; "
                "producers stop sending there"
            )
            log.info("%s", remark)
        else:
            remark = f"{request.broker_name} serves no topic here: check the name with mqctl clusterList"
        return namesrv_pb2.WipeWritePermResponse(code=OK, remark=remark, wiped_topic_count=count)

    # keep-alive ----------------------------------------------------------------------------------------------
    async def KeepAlive(self, request_iterator, context):
        if self._closing.is_set():
            await context.write(
                namesrv_pb2.KeepAliveResponse(
                    code=ResponseCode.SERVICE_NOT_AVAILABLE,
                    remark="this nameserver is stopping: keep alive with the other nameservers and retry later",
                )
            )
            return
        stopping = asyncio.ensure_future(self._closing.wait())
        try:
            first = await self._read(context, stopping)
            if first is None:
                return
            if _addr_problem("broker_addr", first.broker_addr, "") is not None:
                await context.write(
                    namesrv_pb2.KeepAliveResponse(
                        code=INVALID,
                        remark=f"broker_addr {first.broker_addr!r} is not host:port: "
                        "the first message must name the broker",
                    )
                )
                return
            await self._keep_alive(first, context, stopping)
        finally:
            stopping.cancel()

    async def _keep_alive(self, first, context, stopping: asyncio.Future) -> None:
        addr = first.broker_addr
        generation = self._next_generation
        self._next_generation += 1
        replaced = self._stream_generation.get(addr)
        self._stream_generation[addr] = generation
        log.info(
            "keep-alive stream #%d of %s opened%s", generation, addr, f" (replaces #{replaced})" if replaced else ""
        )
        reason = "nameserver stopping"
        try:
            request = first
            while request is not None:
                await context.write(self._pong(addr))
                request = await self._read(context, stopping)
            if not stopping.done():
                reason = "call cancelled" if context.cancelled() else "stream closed"
        except asyncio.CancelledError:
            reason = "call cancelled"
            raise
        except Exception as exc:  # a failed read or write: the peer is gone
            reason = f"connection failed: {exc.__class__.__name__}"
        finally:
            self._on_stream_end(addr, generation, reason)

    def _pong(self, addr: str) -> namesrv_pb2.KeepAliveResponse:
        if self.table.touch(addr, self._clock_ms()):
            return namesrv_pb2.KeepAliveResponse(code=OK, remark="alive")
        return namesrv_pb2.KeepAliveResponse(
            code=ResponseCode.QUERY_NOT_FOUND,
            remark=f"{addr} is not registered on this nameserver: send RegisterBroker now",
        )

    async def _read(self, context, stopping: asyncio.Future):
        """The next request, or None when the stream ended or the nameserver is stopping."""
        read = asyncio.ensure_future(context.read())
        try:
            await asyncio.wait({read, stopping}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            read.cancel()
            raise
        if not read.done():
            read.cancel()
            return None
        message = read.result()
        return None if message is grpc.aio.EOF else message

    def _on_stream_end(self, addr: str, generation: int, reason: str) -> None:
        if self._stream_generation.get(addr) != generation:
            log.info("keep-alive stream #%d of %s ended (%s); a newer stream is open, keeping the broker",
                     generation, addr, reason)
            return
        del self._stream_generation[addr]
        if self._closing.is_set():
            return
        identity = self.table.broker_identity(addr)
        if self.table.on_channel_destroy(addr):
            if self.metrics is not None:
                self.metrics.on_expired("stream_break")
            what = f"{identity[0]} id {identity[1]}" if identity else "live entry"
            log.info("keep-alive stream #%d of %s ended (%s); dropped %s from the route table",
                     generation, addr, reason, what)
        else:
            log.info("keep-alive stream #%d of %s ended (%s); it was not registered", generation, addr, reason)
