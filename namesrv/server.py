"""NamesrvServer: the nameserver's composition root (RocketMQ's NamesrvController), wiring only.

It owns one route table and one KV config, hands them to the remoting processors and the route table to the
housekeeping scan; both share one monotonic clock. The remoting server listens on ``listenPort`` and tells the
processors about every closed connection (the channel-close path). ``route_table`` is public for the metrics.

Start order: check the ports (a taken one fails before anything else runs, naming its key), load the KV config,
listen, metrics (when ``metricsExporterType=PROM``), housekeeping.
Stop order: stop metrics, mark the processors stopping (connections closed from here on are no broker failures),
stop the remoting server with a 5 s grace for requests in flight, then the scan, then write the KV config.
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.auth import setup as auth_setup
from common.metrics import ScrapeCollector, held_bytes_collector, new_registry
from common.metrics_server import MetricsServer
from common.ports import check_ports
from common.service import Service
from namesrv.config import NamesrvConfig
from namesrv.housekeeping import BrokerHousekeepingService
from namesrv.kv_config import KVConfigManager
from namesrv.metrics import NamesrvMetrics
from namesrv.processors import NamesrvProcessors, monotonic_ms
from namesrv.route_table import RouteInfoManager
from remoting.connection import Limits
from remoting.held_bytes import HeldBytes
from remoting.server import RemotingServer

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0


class NamesrvServer(Service):
    def __init__(self, config: NamesrvConfig) -> None:
        super().__init__("NamesrvServer")
        self.config = config
        self.route_table = RouteInfoManager(default_timeout_ms=config.broker_channel_expired_time)
        self.kv_config = KVConfigManager(
            config.kv_config_path,
            max_entries=config.max_kv_config_entries,
            max_entries_per_namespace=config.max_kv_config_entries_per_namespace,
        )
        self.remoting = RemotingServer(
            "nameserver",
            config.listen_host,
            config.listen_port,
            idle_timeout_s=config.server_channel_max_idle_time_seconds,
            limits=Limits(frame_timeout_s=config.server_frame_timeout_millis / 1000),
            held_bytes=HeldBytes(config.server_max_held_bytes, name="nameserver"),
            tls=config.tls,
        )
        self.metrics_registry = new_registry()
        self.metrics = NamesrvMetrics(self.metrics_registry, node_id=f"{config.listen_host}:{config.listen_port}",
                                      route_table=self.route_table, clock_ms=monotonic_ms,
                                      broker_connections=self._broker_connections)
        self.metrics.registry.register(ScrapeCollector("kv-config", self.kv_config.metric_families))
        self.metrics.registry.register(held_bytes_collector(self.remoting.held_bytes.snapshot))
        self.metrics_server: MetricsServer | None = None
        self.processors = NamesrvProcessors(self.route_table, self.kv_config,
                                            order_message_enable=config.order_message_enable,
                                            clock_ms=monotonic_ms, metrics=self.metrics)
        self.processors.register(self.remoting)
        # ACL 2.0, when namesrv.conf turns it on (off: no store is read, no AUTH_* code served, nothing changes)
        auth_setup.install(config.auth, Path(config.kv_config_path).expanduser().parent, [self.remoting],
                           name="nameserver")
        self.remoting.on_close(self.processors.on_connection_closed)
        self.housekeeping = BrokerHousekeepingService(
            self.route_table, scan_interval_ms=config.scan_not_active_broker_interval, clock_ms=monotonic_ms,
            metrics=self.metrics,
        )
        self.bound_port = 0
        self.controller = None
        if config.controller is not None:
            from controller.service import ControllerService  # etcd's client only when the controller runs here

            self.controller = ControllerService(config.controller, remoting=self.remoting,
                                                metrics_registry=self.metrics_registry)

    def _broker_connections(self) -> int:
        return sum(1 for conn in self.remoting.connections if self.route_table.channel_in_use(conn))

    @property
    def listen_addr(self) -> str:
        """``host:port`` clients can dial; 127.0.0.1 when listening on every interface."""
        host = self.config.listen_host
        if host in ("0.0.0.0", "::", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.bound_port}"

    async def on_start(self) -> None:
        check_ports(self.config.listen_ports(), server="the nameserver")
        self.kv_config.load()
        self.bound_port = await self.remoting.start()
        self.metrics.set_node_id(self.listen_addr)
        if self.config.metrics_enabled:
            self.metrics_server = MetricsServer(self.metrics_registry, host=self.config.metrics_prom_exporter_host,
                                                port=self.config.metrics_prom_exporter_port)
            await self.metrics_server.start()
        await self.housekeeping.start()
        if self.controller is not None:
            await self.controller.start()
        log.info(
            "nameserver listening on %s:%d (remoting); silent brokers expire after %d ms (scan every %d ms), "
            "idle connections close after %d s",
            self.config.listen_host,
            self.bound_port,
            self.config.broker_channel_expired_time,
            self.config.scan_not_active_broker_interval,
            self.config.server_channel_max_idle_time_seconds,
        )

    async def on_stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        self.processors.stopping = True
        await self.remoting.stop(STOP_GRACE_S)
        await self.housekeeping.stop()
        try:
            await self.kv_config.close()  # what the batching still holds (puts answered already are on disk)
        except OSError as exc:
            log.error("writing the KV config %s at stop failed: %s", self.kv_config.path, exc)
        log.info("nameserver stopped")
