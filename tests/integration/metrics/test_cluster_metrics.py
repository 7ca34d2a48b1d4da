"""A real Prometheus scrapes a real nameserver, SYNC_MASTER and slave (every second) and sees what happened:
counters move with sends and pulls, consumer lag follows committed offsets, replication lag rises while the slave
is paused (SIGSTOP) and returns to zero after it resumes, and every dashboard query returns series."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from tests.integration.broker.rpc import BrokerClient, message
from tests.integration.metrics.conftest import CONTROLLER_ROW, dashboard_queries
from tests.integration.metrics.prom import PrometheusServer
from harness.procs import Broker, Namesrv
from harness.waiting import async_wait_until, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLUSTER = "MetricsCluster"
GROUP = "metrics-group"
BODY = b"m" * 600
MASTER = f'cluster="{CLUSTER}",node_id="broker-a",broker_id="0",role="SYNC_MASTER"'
SLAVE = f'cluster="{CLUSTER}",node_id="broker-a",broker_id="1",role="SLAVE"'


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics-cluster")
    started = []
    try:
        ns = Namesrv(root / "namesrv").start()
        started.append(ns)
        master = Broker(root / "master", name="broker-a", namesrv_addr=ns.addr, role="SYNC_MASTER",
                        cluster=CLUSTER).start()
        started.append(master)
        slave = Broker(root / "slave", name="broker-a", namesrv_addr=ns.addr, role="SLAVE", broker_id=1,
                       cluster=CLUSTER).start()
        started.append(slave)
        yield ns, master, slave
    finally:
        for proc in reversed(started):
            proc.stop()


def serves_metrics(port: int) -> bool:
    """A wait predicate: a refused connection raises, and the wait reports it as its last error."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        return resp.status == 200 and b"# TYPE" in resp.read()


@pytest.fixture(scope="module")
def prometheus(prometheus_binary, cluster, tmp_path_factory):
    ns, master, slave = cluster
    for proc in cluster:
        wait_until(lambda proc=proc: serves_metrics(proc.metrics_port), 10,
                   f"{proc.module} at {proc.addr} serves no /metrics on metricsPromExporterPort {proc.metrics_port}:"
                   " is common.metrics_server.MetricsServer wired into its server.py?")
    server = PrometheusServer(prometheus_binary, tmp_path_factory.mktemp("prometheus"), {
        "pyrmq-namesrv": [f"127.0.0.1:{ns.metrics_port}"],
        "pyrmq-broker": [f"127.0.0.1:{master.metrics_port}", f"127.0.0.1:{slave.metrics_port}"],
    }).start()
    try:
        wait_until(lambda: len(server.targets_up()) == 3 and all(v == 1 for v in server.targets_up().values()),
                   30, lambda: f"not every pyrmq server is scraped: {server.targets_up()}")
        # SYNC_MASTER sends only answer SEND_OK with a slave attached: wait for the HA link, seen through metrics.
        wait_until(lambda: server.value(f"rocketmq_ha_in_sync_slaves{{{MASTER}}}") == 1, 30,
                   "the master never reported an in-sync slave (rocketmq_ha_in_sync_slaves)")
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(cluster):
    c = BrokerClient(cluster[1].addr)
    yield c
    await c.close()


async def send_batches(client: BrokerClient, topic: str, batches: int, per_batch: int) -> list[int]:
    codes = []
    for _ in range(batches):
        resp = await client.send(topic, 0, [message(BODY) for _ in range(per_batch)])
        codes.append(resp.code)
    return codes


async def until(prom: PrometheusServer, promql: str, predicate, timeout_s: float = 20.0) -> float | None:
    """Wait until ``predicate(value of promql)`` holds; returns the value."""
    last: list[float | None] = [None]

    async def check():
        last[0] = await asyncio.to_thread(prom.value, promql)
        return last[0] is not None and predicate(last[0])

    await async_wait_until(check, timeout_s, lambda: f"{promql} = {last[0]}", interval_s=0.5)
    return last[0]


async def test_send_and_pull_counters_move_with_traffic(prometheus, client, cluster):
    topic = "MetricsCounters"
    codes = await send_batches(client, topic, batches=5, per_batch=4)
    assert codes == [ResponseCode.SUCCESS] * 5
    pulled = await client.pull_all(GROUP, topic, 0)
    assert len(pulled) == 20

    sel = f'{MASTER},topic="{topic}"'
    await until(prometheus, f"rocketmq_messages_in_total{{{sel}}}", lambda v: v == 20)
    await until(prometheus, f"rocketmq_throughput_in_total{{{sel}}}", lambda v: v == 20 * len(BODY))
    await until(prometheus, f'rocketmq_message_size_bucket{{{sel},le="1024.0"}}', lambda v: v == 20)
    await until(prometheus, f'rocketmq_messages_out_total{{{sel},consumer_group="{GROUP}"}}', lambda v: v == 20)
    await until(prometheus, f'rocketmq_throughput_out_total{{{sel},consumer_group="{GROUP}"}}', lambda v: v > 0)
    await until(prometheus, f'rocketmq_send_results_total{{{MASTER},status="PUT_OK"}}', lambda v: v >= 20)
    await until(prometheus, f"rocketmq_ha_sync_wait_seconds_count{{{MASTER}}}", lambda v: v >= 5)
    master_max = await until(prometheus, f"rocketmq_commitlog_max_offset_bytes{{{MASTER}}}", lambda v: v > 0)
    await until(prometheus, f"rocketmq_commitlog_max_offset_bytes{{{SLAVE}}}", lambda v: v >= master_max)
    await until(prometheus, f"rocketmq_ha_transfer_bytes_total{{{MASTER}}}", lambda v: v > 0)
    await until(prometheus, f"rocketmq_ha_replicated_bytes_total{{{SLAVE}}}", lambda v: v > 0)
    await until(prometheus, f"rocketmq_ha_connected{{{SLAVE}}}", lambda v: v == 1)
    await until(prometheus, f"rocketmq_storage_size{{{MASTER}}}", lambda v: v > 0)


async def test_namesrv_counts_live_brokers_and_route_queries(prometheus, cluster):
    ns = cluster[0]
    remoting = RemotingClient()
    try:
        found, missing = [
            await remoting.invoke(ns.addr, RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": t}), 10)
            for t in ("MetricsCounters", "NoSuchTopic")
        ]
    finally:
        await remoting.close()
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and found.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
    live = f'broker_cluster="{CLUSTER}",node_type="namesrv"'
    await until(prometheus, f'rocketmq_namesrv_live_brokers{{{live},role="MASTER"}}', lambda v: v == 1)
    await until(prometheus, f'rocketmq_namesrv_live_brokers{{{live},role="SLAVE"}}', lambda v: v == 1)
    await until(prometheus, 'rocketmq_namesrv_route_queries_total{result="not_found"}', lambda v: v >= 1)
    await until(prometheus, 'sum(rocketmq_namesrv_registrations_total{result="ok"})', lambda v: v >= 2)


async def test_consumer_lag_follows_committed_offsets(prometheus, client):
    topic = "MetricsLag"
    assert await send_batches(client, topic, batches=2, per_batch=5) == [ResponseCode.SUCCESS] * 2
    ack = await client.commit_offset(GROUP, topic, 0, 3)
    assert ack.code == ResponseCode.SUCCESS, ack.remark
    sel = f'{MASTER},topic="{topic}",consumer_group="{GROUP}"'
    await until(prometheus, f"rocketmq_consumer_lag_messages{{{sel}}}", lambda v: v == 7)
    await until(prometheus, f"rocketmq_consumer_lag_latency_milliseconds{{{sel}}}", lambda v: v > 0)
    ack = await client.commit_offset(GROUP, topic, 0, 10)
    assert ack.code == ResponseCode.SUCCESS, ack.remark
    await until(prometheus, f"rocketmq_consumer_lag_messages{{{sel}}}", lambda v: v == 0)
    await until(prometheus, f"rocketmq_consumer_lag_latency_milliseconds{{{sel}}}", lambda v: v == 0)


async def test_replication_lag_rises_while_the_slave_is_paused_and_returns_to_zero(prometheus, client, cluster):
    slave = cluster[2]
    topic = "MetricsReplication"
    behind = f"max(rocketmq_ha_slave_fall_behind_bytes{{{MASTER}}})"
    await until(prometheus, behind, lambda v: v == 0)
    timeouts_before = await asyncio.to_thread(prometheus.value, f"rocketmq_ha_sync_timeouts_total{{{MASTER}}}")
    slave.pause()
    try:
        # A SYNC_MASTER stores each batch and waits up to 3 s for the (frozen) slave: FLUSH_SLAVE_TIMEOUT.
        sends = [asyncio.ensure_future(client.send(topic, 0, [message(BODY) for _ in range(10)])) for _ in range(3)]
        await until(prometheus, behind, lambda v: v >= 10 * len(BODY), timeout_s=15)
        codes = sorted({(await s).code for s in sends})
        assert codes == [ResponseCode.FLUSH_SLAVE_TIMEOUT], codes
    finally:
        slave.resume()
    await until(prometheus, behind, lambda v: v == 0, timeout_s=30)
    await until(prometheus, f"rocketmq_ha_in_sync_slaves{{{MASTER}}}", lambda v: v == 1)
    await until(prometheus, f"rocketmq_ha_sync_timeouts_total{{{MASTER}}}", lambda v: v >= timeouts_before + 3)
    await until(prometheus, f'rocketmq_send_results_total{{{MASTER},status="FLUSH_SLAVE_TIMEOUT"}}',
                lambda v: v >= 30)
    await until(prometheus, f'rocketmq_messages_in_total{{{MASTER},topic="{topic}"}}', lambda v: v == 30)
    # replication caught up: both commitlogs end at the same offset
    await until(prometheus, f"rocketmq_commitlog_max_offset_bytes{{{MASTER}}} - ignoring(broker_id, role, instance) "
                            f"rocketmq_commitlog_max_offset_bytes{{{SLAVE}}}", lambda v: v == 0)


async def test_every_dashboard_query_returns_series(prometheus, client):
    topic = "MetricsDashboard"
    assert await send_batches(client, topic, batches=3, per_batch=4) == [ResponseCode.SUCCESS] * 3
    await client.pull_all(GROUP, topic, 0)
    ack = await client.commit_offset(GROUP, topic, 0, 6)
    assert ack.code == ResponseCode.SUCCESS, ack.remark
    queries = dashboard_queries(skip_rows=(CONTROLLER_ROW,))  # a classic cluster

    def missing() -> list[str]:
        return [f"{title}: {expr}" for title, expr in queries if not prometheus.query(expr)]

    # The slave's first metadata sync runs 3 s after it starts; rate() needs two scrapes.
    await async_wait_until(lambda: asyncio.to_thread(lambda: not missing()), 40,
                           lambda: "queries without series:\n" + "\n".join(missing()), interval_s=1.0)
