"""The nameserver's remoting processors (RocketMQ's DefaultRequestProcessor): validate -> route table -> response.

One function per request code (spec remoting.md §2.1), registered on a ``RemotingServer`` by ``register``. Headers
are read with ``remoting.headers.Fields``: a missing or unparsable field, a field that parses but can never be
valid (an address without a port, a negative brokerId) and a body of the wrong shape (``namesrv.bodies``) answer 29
INVALID_PARAMETER saying what was expected, where RocketMQ answers 1 (a broker's registration raises any code
alike); a body whose CRC does not match keeps RocketMQ's 1 and text (resending may help). Nothing is stored then. Every
non-zero answer has a remark that says what to do; successes carry a short remark too (RocketMQ clients ignore it).
Codes nobody registered are answered REQUEST_CODE_NOT_SUPPORTED by the server (RocketMQ's nameserver stays silent).

Liveness (spec rocketmq-replication.md §2.4): REGISTER_BROKER records the connection it came over in the broker's
live entry; when that connection closes (the broker stopped or died and the kernel reset it, or it stayed idle past
``serverChannelMaxIdleTimeSeconds``), ``on_connection_closed`` drops every broker whose *latest* registration came
over it, so a broker that re-registered over a new connection before the old one's close was noticed stays. Silence
on an open connection is the housekeeping scan's job (``brokerChannelExpiredTime``).

pyrmq additions RocketMQ clients ignore: ClusterInfo carries ``brokerLiveTable`` (see ``namesrv.bodies``); the
register reply's remark says whether a slave's master is known yet.

Task safety: all on the server's event loop; the route table is only touched between awaits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from common.log import RateLimitedLog
from namesrv import bodies
from namesrv import route_table as rt
from namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigFull, KVConfigManager
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields, HeaderError, NumberError, parse_host_port
from remoting.server import RemotingServer

log = logging.getLogger(__name__)
refused_log = RateLimitedLog(log)  # a peer can send bad registrations at will: at most one line per 10 s

OK = ResponseCode.SUCCESS
NO_ROUTE_HINT = "create it with mqctl updateTopic or enable autoCreateTopicEnable on a broker"


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_addr(field: str, value: str, fix: str) -> None:
    try:
        parse_host_port(value, f"header field {field}")
    except NumberError as exc:
        raise HeaderError(f"{exc}: {fix}", code=ResponseCode.INVALID_PARAMETER) from None


def _broker_id(fields: Fields) -> int:
    broker_id = fields.req_long("brokerId")
    if broker_id < 0:
        raise HeaderError(
            f"{fields.what}: brokerId {broker_id} is negative: use 0 for the master and 1, 2, ... for slaves",
            code=ResponseCode.INVALID_PARAMETER,
        )
    return broker_id


class NamesrvProcessors:
    def __init__(
        self,
        table: rt.RouteInfoManager,
        kv: KVConfigManager,
        *,
        order_message_enable: bool = False,
        clock_ms: Callable[[], int] = monotonic_ms,
        wall_clock_ms: Callable[[], int] = wall_ms,
        metrics=None,
    ) -> None:
        self.table = table
        self.kv = kv
        self.order_message_enable = order_message_enable
        self.metrics = metrics  # namesrv.metrics.NamesrvMetrics or None
        self._clock_ms = clock_ms
        self._wall_clock_ms = wall_clock_ms
        self.stopping = False  # set at shutdown: connections closed then are no broker failures
        # any peer can put KV entries at will: their log lines are rate-limited
        self._kv_log = RateLimitedLog(log, 1.0)
        self._kv_refusal_log = RateLimitedLog(log, 10.0)

    def register(self, server: RemotingServer) -> None:
        for code, processor in (
            (RequestCode.REGISTER_BROKER, self.register_broker),
            (RequestCode.UNREGISTER_BROKER, self.unregister_broker),
            (RequestCode.QUERY_DATA_VERSION, self.query_data_version),
            (RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route_info),
            (RequestCode.GET_BROKER_CLUSTER_INFO, self.get_broker_cluster_info),
            (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topic_list),
            (RequestCode.GET_TOPICS_BY_CLUSTER, self.get_topics_by_cluster),
            (RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic),
            (RequestCode.WIPE_WRITE_PERM_OF_BROKER, self.wipe_write_perm),
            (RequestCode.ADD_WRITE_PERM_OF_BROKER, self.add_write_perm),
            (RequestCode.PUT_KV_CONFIG, self.put_kv_config),
            (RequestCode.GET_KV_CONFIG, self.get_kv_config),
            (RequestCode.DELETE_KV_CONFIG, self.delete_kv_config),
            (RequestCode.GET_KVLIST_BY_NAMESPACE, self.get_kv_list_by_namespace),
        ):
            server.register(code, processor)

    # liveness --------------------------------------------------------------------------------------------------
    def on_connection_closed(self, conn: Connection) -> None:
        """RocketMQ's channel-close path: drop the brokers whose latest registration came over ``conn``."""
        if self.stopping:
            return
        identities = {addr: self.table.broker_identity(addr) for addr, live in self.table.broker_live_table.items()
                      if live.channel is conn}
        dropped = self.table.on_channel_close(conn)
        if not dropped:
            return
        if self.metrics is not None:
            self.metrics.on_expired("channel_closed", len(dropped))
        for addr in dropped:
            who = identities.get(addr)
            what = f"{who[0]} id {who[1]}" if who else "live entry"
            log.info("connection %s of broker %s closed; dropped %s from the route table", conn.peer, addr, what)

    # registration ----------------------------------------------------------------------------------------------
    def register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """REGISTER_BROKER (103). Reply header ``haServerAddr``/``masterAddr`` for a slave whose master is live;
        reply body the ORDER_TOPIC_CONFIG KVTable when it has entries."""
        ext = request.ext or {}
        try:
            fields = Fields(ext, "REGISTER_BROKER")
            cluster = fields.req_str("clusterName")
            broker_name = fields.req_str("brokerName")
            broker_addr = fields.req_str("brokerAddr")
            _check_addr("brokerAddr", broker_addr, "set brokerIP1 and listenPort in the broker conf")
            ha_server_addr = fields.req_str("haServerAddr")
            _check_addr("haServerAddr", ha_server_addr, "set brokerIP2 and haListenPort in the broker conf")
            broker_id = _broker_id(fields)
            compressed = fields.bool("compressed", False)
            crc = fields.int("bodyCrc32", 0)
            timeout_ms = fields.long("heartbeatTimeoutMillis", 0)
        except HeaderError:
            self._count_register(0 if ext.get("brokerId") in (None, "0") else 1, ok=False)
            raise
        body = request.body_bytes()
        if crc and bodies.body_crc32(body) != crc:
            self._count_register(broker_id, ok=False)
            return response_to(request, ResponseCode.SYSTEM_ERROR,
                               f"crc32 not match: bodyCrc32={crc} but the {len(body)}-byte body has "
                               f"{bodies.body_crc32(body)}; resend the registration")
        try:
            parsed = bodies.decode_register_body(body, compressed=compressed, version=request.version)
        except bodies.BodyError as exc:
            self._count_register(broker_id, ok=False)
            refused_log.warning("refused the registration of %s id %d from %s: %s", broker_name, broker_id, conn.peer,
                                exc)
            return response_to(request, ResponseCode.INVALID_PARAMETER, f"REGISTER_BROKER body: {exc}")
        result = self.table.register_broker(
            cluster=cluster,
            broker_name=broker_name,
            broker_addr=broker_addr,
            broker_id=broker_id,
            ha_server_addr=ha_server_addr,
            data_version=parsed.data_version,
            topic_configs=parsed.topic_configs,
            now_ms=self._clock_ms(),
            timeout_ms=timeout_ms,
            channel=conn,
        )
        self._count_register(broker_id, ok=True)
        who = f"{broker_name} id {broker_id} at {broker_addr}"
        out_ext: dict[str, str] = {}
        if broker_id == rt.MASTER_ID:
            remark = f"registered master {who} with {len(parsed.topic_configs)} topics"
        elif result.master_addr:
            remark = f"registered slave {who}; master {result.master_addr}, HA {result.ha_server_addr}"
            out_ext = {"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr}
        else:
            remark = (
                f"registered slave {who}; no master of {broker_name} is registered yet: "
                "its address comes with a later registration once the master is up (or set haMasterAddress)"
            )
        order = self.kv.namespace(ORDER_TOPIC_CONFIG)
        return response_to(request, OK, remark, ext=out_ext, body=bodies.kv_table(order) if order else b"")

    def _count_register(self, broker_id: int, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.on_register(broker_id, ok=ok)

    def unregister_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_BROKER (104). An id whose entry holds another address (a successor) is left alone."""
        fields = Fields(request.ext, "UNREGISTER_BROKER")
        cluster = fields.req_str("clusterName")
        broker_name = fields.req_str("brokerName")
        broker_addr = fields.req_str("brokerAddr")
        broker_id = _broker_id(fields)
        changed = self.table.unregister_broker(
            cluster=cluster, broker_name=broker_name, broker_addr=broker_addr, broker_id=broker_id
        )
        if self.metrics is not None:
            self.metrics.on_unregister(changed)
        who = f"{broker_name} id {broker_id} at {broker_addr}"
        remark = f"unregistered {who}" if changed else f"{who} was not registered here; nothing to do"
        log.info("%s (request from %s)", remark, conn.peer)
        return response_to(request, OK, remark)

    def query_data_version(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """QUERY_DATA_VERSION (322): header ``changed``; body this nameserver's DataVersion of the broker, if any.
        An unchanged answer refreshes the broker's live entry (it doubles as a heartbeat)."""
        fields = Fields(request.ext, "QUERY_DATA_VERSION")
        fields.req_str("clusterName")
        fields.req_str("brokerName")
        broker_addr = fields.req_str("brokerAddr")
        _broker_id(fields)
        try:
            version = bodies.decode_data_version(request.body_bytes(), "QUERY_DATA_VERSION body")
        except bodies.BodyError as exc:
            return response_to(request, ResponseCode.INVALID_PARAMETER, str(exc))
        changed, stored = self.table.query_data_version(broker_addr, version, self._clock_ms())
        body = bodies.dumps(bodies.data_version_json(stored)) if stored is not None else b""
        remark = "changed: register now" if changed else "unchanged; the broker's live entry was refreshed"
        return response_to(request, OK, remark, ext={"changed": "true" if changed else "false"}, body=body)

    # queries ---------------------------------------------------------------------------------------------------
    def get_route_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC (105): TopicRouteData, bare numeric keys for callers older than 4.9.4 (see
        ``namesrv.bodies``); TOPIC_NOT_EXIST (17) without queue and broker data."""
        try:
            fields = Fields(request.ext, "GET_ROUTEINFO_BY_TOPIC")
            topic = fields.req_str("topic")
            standard = bodies.standard_json(request.version, fields.bool("acceptStandardJsonOnly", False))
        except HeaderError:
            self._count_route("invalid")
            raise
        route = self.table.pickup_topic_route(topic)
        if route is None:
            self._count_route("not_found")
            return response_to(request, ResponseCode.TOPIC_NOT_EXIST,
                               f"No topic route info in name server for the topic: {topic}; {NO_ROUTE_HINT}")
        self._count_route("found")
        order = self.kv.get(ORDER_TOPIC_CONFIG, topic) if self.order_message_enable else None
        body = bodies.dumps(bodies.route_json(route, order), standard=standard)
        return response_to(request, OK, f"{len(route.queue_datas)} broker groups serve {topic}", body=body)

    def _count_route(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.on_route_query(result)

    def get_broker_cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO (106): ClusterInfo plus pyrmq's ``brokerLiveTable``; numeric keys as for
        routes (a Java namesrv writes them bare for everyone; its clients read both)."""
        fields = Fields(request.ext, "GET_BROKER_CLUSTER_INFO")
        standard = bodies.standard_json(request.version, fields.bool("acceptStandardJsonOnly", False))
        live = self.table.live_brokers()
        info = bodies.cluster_info_json(
            self.table.broker_addr_table,
            self.table.cluster_addr_table,
            live,
            wall_offset_ms=self._wall_clock_ms() - self._clock_ms(),
        )
        remark = f"{len(self.table.broker_addr_table)} broker groups, {len(live)} live brokers"
        return response_to(request, OK, remark, body=bodies.dumps(info, standard=standard))

    def get_all_topic_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): ``{"topicList":[...]}``, every topic with a route."""
        topics = self.table.all_topics()
        return response_to(request, OK, f"{len(topics)} topics", body=bodies.topic_list(topics))

    def get_topics_by_cluster(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_TOPICS_BY_CLUSTER (224): header ``cluster``; the topics served by that cluster's broker groups."""
        cluster = Fields(request.ext, "GET_TOPICS_BY_CLUSTER").req_str("cluster")
        topics = self.table.topics_by_cluster(cluster)
        remark = f"{len(topics)} topics in cluster {cluster}"
        if cluster not in self.table.cluster_addr_table:
            remark = f"cluster {cluster} has no registered broker here: check the name with mqctl clusterList"
        return response_to(request, OK, remark, body=bodies.topic_list(topics))

    # admin -----------------------------------------------------------------------------------------------------
    def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV (216): header ``topic``, optional ``clusterName`` (only that cluster's queues)."""
        fields = Fields(request.ext, "DELETE_TOPIC_IN_NAMESRV")
        topic = fields.req_str("topic")
        cluster = fields.str("clusterName", "") or ""
        scope = f" in cluster {cluster}" if cluster else ""
        if self.table.delete_topic(topic, cluster):
            remark = f"deleted the route of {topic}{scope}; delete it on the brokers too or they re-register it"
            log.info("%s (request from %s)", remark, conn.peer)
        else:
            remark = f"topic {topic} has no route{scope} here; nothing to delete"
        return response_to(request, OK, remark)

    def wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER (205): header ``brokerName``; reply header ``wipeTopicCount``."""
        return self._change_perm(conn, request, "WIPE_WRITE_PERM_OF_BROKER", self.table.wipe_write_perm,
                                 "wipeTopicCount", "lost its write permission on {count} topics; producers stop "
                                 "sending there")

    def add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER (327): header ``brokerName``; its queues become read-write; reply header
        ``addTopicCount``. The broker's next registration with a new DataVersion sets the perms it holds."""
        return self._change_perm(conn, request, "ADD_WRITE_PERM_OF_BROKER", self.table.add_write_perm,
                                 "addTopicCount", "is writable again on {count} topics")

    def _change_perm(self, conn: Connection, request: RemotingCommand, what: str, change: Callable[[str], int],
                     count_field: str, done: str) -> RemotingCommand:
        broker_name = Fields(request.ext, what).req_str("brokerName")
        count = change(broker_name)
        if count:
            remark = f"{broker_name} {done.format(count=count)}"
            log.info("%s (request from %s)", remark, conn.peer)
        else:
            remark = f"{broker_name} serves no topic here: check the name with mqctl clusterList"
        return response_to(request, OK, remark, ext={count_field: str(count)})

    # KV config -------------------------------------------------------------------------------------------------
    async def put_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """PUT_KV_CONFIG (100): header namespace, key, value; kept in ``kvConfigPath``."""
        fields = Fields(request.ext, "PUT_KV_CONFIG")
        namespace, key = fields.req_str("namespace"), fields.req_str("key")
        value = fields.req_str("value")
        try:
            previous = self.kv.put(namespace, key, value)
        except KVConfigFull as exc:
            self._kv_refusal_log.warning("KV config %s/%s refused (request from %s): %s", namespace, key, conn.peer,
                                         exc)
            return response_to(request, ResponseCode.SYSTEM_ERROR, f"{namespace}/{key} not stored: {exc}")
        self._kv_log.log(logging.INFO, "KV config %s/%s = %r (was %r; request from %s)", namespace, key, value[:200],
                         None if previous is None else previous[:200], conn.peer)
        return await self._persisted(request, f"stored {namespace}/{key}")

    def get_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_KV_CONFIG (101): reply header ``value``, or QUERY_NOT_FOUND (22)."""
        fields = Fields(request.ext, "GET_KV_CONFIG")
        namespace, key = fields.req_str("namespace"), fields.req_str("key")
        value = self.kv.get(namespace, key)
        if value is None:
            return response_to(request, ResponseCode.QUERY_NOT_FOUND,
                               f"No config item, Namespace: {namespace} Key: {key}; store it with PUT_KV_CONFIG")
        return response_to(request, OK, f"{namespace}/{key}", ext={"value": value})

    async def delete_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """DELETE_KV_CONFIG (102): always SUCCESS, as in RocketMQ; the remark says whether there was an entry."""
        fields = Fields(request.ext, "DELETE_KV_CONFIG")
        namespace, key = fields.req_str("namespace"), fields.req_str("key")
        if not self.kv.delete(namespace, key):
            return response_to(request, OK, f"{namespace}/{key} was not set; nothing to delete")
        self._kv_log.log(logging.INFO, "KV config %s/%s deleted (request from %s)", namespace, key, conn.peer)
        return await self._persisted(request, f"deleted {namespace}/{key}")

    def get_kv_list_by_namespace(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_KVLIST_BY_NAMESPACE (219): body KVTable, or QUERY_NOT_FOUND (22) for an empty namespace."""
        namespace = Fields(request.ext, "GET_KVLIST_BY_NAMESPACE").req_str("namespace")
        table = self.kv.namespace(namespace)
        if table is None:
            return response_to(request, ResponseCode.QUERY_NOT_FOUND,
                               f"No config item, Namespace: {namespace}; store entries with PUT_KV_CONFIG")
        return response_to(request, OK, f"{len(table)} entries in {namespace}", body=bodies.kv_table(table))

    async def _persisted(self, request: RemotingCommand, done: str) -> RemotingCommand:
        try:
            await self.kv.persist()
        except OSError as exc:
            log.error("cannot write the KV config to %s: %s", self.kv.path, exc)
            return response_to(request, OK, f"{done} in memory only: writing {self.kv.path} failed ({exc}); "
                                            "set kvConfigPath to a writable file or it is lost at restart")
        return response_to(request, OK, done)
