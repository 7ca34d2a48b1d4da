"""NamesrvMetrics: the nameserver's Prometheus series (RocketMQ has none; names follow its 5.x conventions).

- ``rocketmq_namesrv_live_brokers{broker_cluster,role}`` and ``rocketmq_namesrv_broker_groups{broker_cluster}``:
  gauges computed from the route table at SCRAPE time (``role`` is ``MASTER`` for brokerId 0, else ``SLAVE``).
- ``rocketmq_namesrv_broker_heartbeat_age_seconds{broker_cluster,broker_name,broker_id,broker_addr}``: how long
  ago each live broker last registered or pinged, also at scrape time.
- ``rocketmq_namesrv_topics``: topics with a route.
- ``rocketmq_namesrv_broker_connections``: open connections over which a live broker registered.
- counters bumped by the processors and the housekeeping scan: ``rocketmq_namesrv_registrations_total{role,result}``,
  ``rocketmq_namesrv_unregistrations_total``, ``rocketmq_namesrv_broker_expiries_total{reason}`` (``silence``:
  the scan dropped a silent broker; ``channel_closed``: the connection it registered over closed) and
  ``rocketmq_namesrv_route_queries_total{result}`` (``found``, ``not_found``, ``invalid``).

Common labels: ``node_type="namesrv"`` and ``node_id`` (the nameserver's listen address). The brokers' cluster is
``broker_cluster`` because a nameserver can serve several clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from common.metrics import ConstLabels, ScrapeCollector
from namesrv.route_table import MASTER_ID, RouteInfoManager

EXPIRY_REASONS = ("silence", "channel_closed")
ROUTE_RESULTS = ("found", "not_found", "invalid")


class NamesrvMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        node_id: str,
        route_table: RouteInfoManager | None = None,
        clock_ms: Callable[[], int] | None = None,
        broker_connections: Callable[[], int] | None = None,
    ) -> None:
        reg = self.registry = CollectorRegistry(auto_describe=True)
        self._const = ConstLabels(reg, {"node_type": "namesrv", "node_id": node_id})
        registry.register(self._const)
        self.route_table = route_table
        self._clock_ms = clock_ms
        self._broker_connections = broker_connections
        self.registrations = Counter("rocketmq_namesrv_registrations",
                                     "REGISTER_BROKER requests, by broker role and result.",
                                     ["role", "result"], registry=reg)
        self.unregistrations = Counter("rocketmq_namesrv_unregistrations",
                                       "UNREGISTER_BROKER requests that removed a broker.", registry=reg)
        self.expiries = Counter("rocketmq_namesrv_broker_expiries",
                                "Brokers dropped from the route table without unregistering, by reason.",
                                ["reason"], registry=reg)
        self.route_queries = Counter("rocketmq_namesrv_route_queries", "GET_ROUTEINFO_BY_TOPIC requests, by result.",
                                     ["result"], registry=reg)
        for reason in EXPIRY_REASONS:
            self.expiries.labels(reason)
        for result in ROUTE_RESULTS:
            self.route_queries.labels(result)
        for role in ("MASTER", "SLAVE"):
            self.registrations.labels(role, "ok")
        reg.register(ScrapeCollector("route-table", self._collect))

    def set_node_id(self, node_id: str) -> None:
        """The listen address once bound (port 0 in tests); applies from the next scrape."""
        self._const.labels["node_id"] = node_id

    # counters (called by the processors / housekeeping) ----------------------------------------------------------
    def on_register(self, broker_id: int, ok: bool = True) -> None:
        self.registrations.labels("MASTER" if broker_id == MASTER_ID else "SLAVE", "ok" if ok else "invalid").inc()

    def on_unregister(self, changed: bool) -> None:
        if changed:
            self.unregistrations.inc()

    def on_expired(self, reason: str, count: int = 1) -> None:
        """``reason``: ``silence`` (housekeeping scan) or ``channel_closed`` (its connection closed)."""
        if count:
            self.expiries.labels(reason).inc(count)

    def on_route_query(self, result: str) -> None:
        """``result``: ``found``, ``not_found`` or ``invalid``."""
        self.route_queries.labels(result).inc()

    # scrape time -------------------------------------------------------------------------------------------
    def _collect(self) -> Iterable[Metric]:
        table = self.route_table
        if table is None:
            return []
        live = GaugeMetricFamily("rocketmq_namesrv_live_brokers", "Live brokers in the route table, by role.",
                                 labels=["broker_cluster", "role"])
        groups = GaugeMetricFamily("rocketmq_namesrv_broker_groups", "Broker groups (brokerNames) per cluster.",
                                   labels=["broker_cluster"])
        age = GaugeMetricFamily("rocketmq_namesrv_broker_heartbeat_age_seconds",
                                "Seconds since the broker last registered or pinged.",
                                labels=["broker_cluster", "broker_name", "broker_id", "broker_addr"])
        counts: dict[tuple[str, str], int] = {}
        for cluster in table.cluster_addr_table:
            counts[(cluster, "MASTER")] = 0
            counts[(cluster, "SLAVE")] = 0
        now_ms = self._clock_ms() if self._clock_ms is not None else None
        for b in table.live_brokers():
            role = "MASTER" if b.broker_id == MASTER_ID else "SLAVE"
            counts[(b.cluster, role)] = counts.get((b.cluster, role), 0) + 1
            if now_ms is not None:
                age.add_metric([b.cluster, b.broker_name, str(b.broker_id), b.broker_addr],
                               max(0, now_ms - b.info.last_update_ms) / 1000.0)
        for (cluster, role), n in sorted(counts.items()):
            live.add_metric([cluster, role], n)
        for cluster, names in sorted(table.cluster_addr_table.items()):
            groups.add_metric([cluster], len(names))
        out: list[Metric] = [live, groups, age,
                             GaugeMetricFamily("rocketmq_namesrv_topics", "Topics with a route.",
                                               len(table.topic_queue_table))]
        if self._broker_connections is not None:
            out.append(GaugeMetricFamily("rocketmq_namesrv_broker_connections",
                                         "Open connections over which a live broker registered.",
                                         self._broker_connections()))
        return out
