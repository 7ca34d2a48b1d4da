"""A real Prometheus scrapes in-process exporters (BrokerMetrics with the controller-mode families, NamesrvMetrics
and the embedded ControllerMetrics behind MetricsServer) and every
dashboard query returns series. This checks the Prometheus fixture, the exposition format Prometheus accepts
and the dashboard's PromQL without starting brokers; test_cluster_metrics.py does the same on real processes."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from broker.controller_mode.metrics import ControllerModeFacts, families
from broker.ha.status import HAStatus, MasterLinkStatus, SlaveLinkStatus
from broker.metrics import BrokerMetrics, StoreGauges
from broker.store.types import PutStatus
from common.metrics import ScrapeCollector, new_registry
from controller.metrics import ControllerMetrics
from controller.state import GroupState, Member
from common.metrics_server import MetricsServer
from namesrv.metrics import NamesrvMetrics
from namesrv.route_table import DataVersion, RouteInfoManager, TopicConfig
from tests.integration.metrics.conftest import dashboard_queries
from tests.integration.metrics.prom import PrometheusServer
from harness.waiting import wait_until

pytestmark = pytest.mark.integration


class FakeCluster:
    """A nameserver and a master/slave pair as exporters only, ticking traffic on their own event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-exporters", daemon=True)
        self.servers: list[MetricsServer] = []
        self.max_offset = 0
        self.ticks = 0

    def start(self) -> FakeCluster:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        table = RouteInfoManager()
        for bid, port in ((0, 10911), (1, 10921)):
            table.register_broker(cluster="FakeCluster", broker_name="broker-a", broker_addr=f"127.0.0.1:{port}",
                                  broker_id=bid, ha_server_addr="127.0.0.1:10912", data_version=DataVersion(1, 1),
                                  topic_configs=[TopicConfig("T")], now_ms=int(time.monotonic() * 1000))
        ns_reg = new_registry()
        self.ns = NamesrvMetrics(ns_reg, node_id="127.0.0.1:9876", route_table=table,
                                 clock_ms=lambda: int(time.monotonic() * 1000))
        group = GroupState("FakeCluster", "broker-a", {1: Member("127.0.0.1:10911"), 2: Member("127.0.0.1:10921")},
                           1, "127.0.0.1:10911", 1, frozenset({1, 2}), 1)
        self.controller = ControllerMetrics(ns_reg, node_id="ns-controller", is_active=lambda: True,
                                            groups=lambda: [group], without_master_s=lambda name: 0.0)
        master_reg, slave_reg = new_registry(), new_registry()
        self.master = BrokerMetrics(master_reg, cluster="FakeCluster", broker_name="broker-a", broker_id=0,
                                    role="SYNC_MASTER", broker_addr="127.0.0.1:10911", store_dir="/")
        self.slave = BrokerMetrics(slave_reg, cluster="FakeCluster", broker_name="broker-a", broker_id=1,
                                   role="SLAVE", broker_addr="127.0.0.1:10921", store_dir="/")
        offsets = {"T@G": {0: 0}}

        def store() -> StoreGauges:
            return StoreGauges(self.max_offset, 0, self.max_offset, self.max_offset)

        def queue_max(topic: str, queue_id: int) -> int:
            return self.ticks * 4

        def stamp(topic: str, queue_id: int, offset: int) -> int:
            return int(time.time() * 1000) - 1500

        for m in (self.master, self.slave):
            m.set_providers(store=store, consumer_offsets=lambda: offsets, queue_max_offset=queue_max,
                            queue_store_timestamp=stamp)
        # the typed HA status HAService.status() returns, which BrokerMetrics.attach(ha=...) reads as it is
        def master_ha() -> HAStatus:
            link = SlaveLinkStatus("127.0.0.1:50000", 1, self.max_offset - 100, 100, "OK", 0, self.max_offset, 0,
                                   int(time.time() * 1000))
            return HAStatus("SYNC_MASTER", self.max_offset, 0, slaves=(link,), connections_accepted=1)

        def slave_ha() -> HAStatus:
            client = MasterLinkStatus("127.0.0.1:10912", True, self.max_offset, int(time.time() * 1000) - 200, 0,
                                      self.max_offset)
            return HAStatus("SLAVE", self.max_offset, 0, client=client)

        for m, role in ((self.master, "MASTER"), (self.slave, "SLAVE")):
            facts = ControllerModeFacts(master_epoch=1, sync_state_set_size=2, role_changes={role: 1})
            m.registry.register(ScrapeCollector("controller-mode", lambda f=facts: families(lambda: f)))
        self.master.set_providers(ha=master_ha)
        self.slave.set_providers(ha=slave_ha)
        for reg in (ns_reg, master_reg, slave_reg):
            server = MetricsServer(reg, host="127.0.0.1", port=0)
            await server.start()
            self.servers.append(server)
        self.task = asyncio.ensure_future(self._traffic())

    async def _traffic(self) -> None:
        while True:
            self.ticks += 1
            self.max_offset += 4 * 300
            self.master.on_send("T", 4, 4 * 300, PutStatus.PUT_OK, sizes=[300] * 4)
            self.master.on_sync_wait(0.002, PutStatus.PUT_OK)
            self.master.on_pull("T", "G", 4, 4 * 300, suggested_slave=False)
            self.slave.on_pull("T", "G", 1, 300)
            self.slave.on_slave_sync("all", True)
            self.ns.on_route_query("found")
            self.controller.on_election("broker-a", "elected")
            self.ns.on_register(self.ticks % 2)
            await asyncio.sleep(0.1)

    @property
    def ports(self) -> list[int]:
        return [s.bound_port for s in self.servers]

    def stop(self) -> None:
        async def _stop():
            self.task.cancel()
            for s in self.servers:
                await s.stop()

        asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="module")
def fake_cluster():
    cluster = FakeCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def prometheus(prometheus_binary, fake_cluster, tmp_path_factory):
    ns, master, slave = fake_cluster.ports
    server = PrometheusServer(prometheus_binary, tmp_path_factory.mktemp("prometheus"), {
        "pyrmq-namesrv": [f"127.0.0.1:{ns}"],
        "pyrmq-broker": [f"127.0.0.1:{master}", f"127.0.0.1:{slave}"],
    }).start()
    yield server
    server.stop()


def test_prometheus_scrapes_every_exporter(prometheus):
    wait_until(lambda: prometheus.targets_up() and all(v == 1 for v in prometheus.targets_up().values())
               and len(prometheus.targets_up()) == 3, 20, lambda: f"targets: {prometheus.targets_up()}")


def test_counters_reach_prometheus_with_their_labels(prometheus):
    def sent() -> float | None:
        return prometheus.value('rocketmq_messages_in_total{cluster="FakeCluster",node_id="broker-a",'
                                'node_type="broker",broker_id="0",role="SYNC_MASTER",topic="T"}')

    first = wait_until(sent, 20, "rocketmq_messages_in_total never reached Prometheus")
    wait_until(lambda: sent() > first, 10, "rocketmq_messages_in_total does not grow")


def test_every_dashboard_query_returns_series(prometheus):
    queries = dashboard_queries()
    assert len(queries) > 25

    def missing() -> list[str]:
        return [f"{title}: {expr}" for title, expr in queries if not prometheus.query(expr)]

    # rate() needs two samples in its window; give Prometheus a few scrapes.
    wait_until(lambda: not missing(), 30, lambda: "queries without series:\n" + "\n".join(missing()), 1.0)
