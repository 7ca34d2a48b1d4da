"""NamesrvServer: the nameserver's composition root (RocketMQ's NamesrvController), wiring only.

It owns one route table and hands it to the gRPC servicer and the housekeeping scan; both share one monotonic
clock. ``route_table`` is public so a metrics exporter can read it later. Stop order: refuse and end keep-alive
streams, stop the gRPC server with a 5 s grace for in-flight calls, then stop the scan.
"""

from __future__ import annotations

import logging

from common.metrics import MetricsServer, new_registry
from common.service import Service
from namesrv.metrics import NamesrvMetrics
from namesrv.config import NamesrvConfig
from namesrv.housekeeping import BrokerHousekeepingService
from namesrv.route_table import RouteInfoManager
from namesrv.service import NameServerServicer, monotonic_ms
from remoting import channel
from remoting.pb import namesrv_pb2_grpc

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0


class NamesrvServer(Service):
    def __init__(self, config: NamesrvConfig) -> None:
        super().__init__("NamesrvServer")
        self.config = config
        self.route_table = RouteInfoManager(default_timeout_ms=config.broker_channel_expired_time)
        self.metrics_registry = new_registry()
        self.metrics = NamesrvMetrics(self.metrics_registry, node_id=f"{config.listen_host}:{config.listen_port}",
                                      route_table=self.route_table, clock_ms=monotonic_ms,
                                      open_streams=lambda: self.servicer.open_streams)
        self.metrics_server: MetricsServer | None = None
        self.servicer = NameServerServicer(self.route_table, clock_ms=monotonic_ms, metrics=self.metrics)
        self.housekeeping = BrokerHousekeepingService(
            self.route_table, scan_interval_ms=config.scan_not_active_broker_interval, clock_ms=monotonic_ms,
            metrics=self.metrics,
        )
        self.bound_port = 0
        self._server = None

    @property
    def listen_addr(self) -> str:
        """``host:port`` clients can dial; 127.0.0.1 when listening on every interface."""
        host = self.config.listen_host
        if host in ("0.0.0.0", "::", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.bound_port}"

    async def on_start(self) -> None:
        self._server = channel.aio_server()
        namesrv_pb2_grpc.add_NameServerServicer_to_server(self.servicer, self._server)
        self.bound_port = channel.bind(self._server, self.config.listen_host, self.config.listen_port)
        self.metrics.set_node_id(self.listen_addr)
        if self.config.metrics_enabled:
            self.metrics_server = MetricsServer(self.metrics_registry, host=self.config.metrics_prom_exporter_host,
                                                port=self.config.metrics_prom_exporter_port)
            await self.metrics_server.start()
        await self._server.start()
        await self.housekeeping.start()
        log.info(
            "nameserver listening on %s:%d; silent brokers expire after %d ms (scan every %d ms)",
            self.config.listen_host,
            self.bound_port,
            self.config.broker_channel_expired_time,
            self.config.scan_not_active_broker_interval,
        )

    async def on_stop(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        self.servicer.close_streams()
        if self._server is not None:
            await self._server.stop(STOP_GRACE_S)
        await self.housekeeping.stop()
        log.info("nameserver stopped")
