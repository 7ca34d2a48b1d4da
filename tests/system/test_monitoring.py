"""The compose file's Prometheus (public image, or Debian's package where no registry answers) scrapes every pyrmq
server, and every query of the provisioned dashboard returns series from it; where Grafana runs, it serves that
dashboard and answers its queries through the provisioned data source."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

import tests.integration.metrics.conftest as metrics_conftest
from client import Message, Producer, SendStatus
from harness.waiting import async_wait_until, wait_until
from tests.system.cluster import GRAFANA_URL, NAMESRV_ADDR, PROMETHEUS_URL, SERVICES
from tests.system.harness import RecordingConsumer, await_whole, ok, run_async, unique

# deploy/prometheus/prometheus.yml scrapes every 5 s: rate() windows of a minute hold enough samples.
COMPOSE_GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "5s", "$__range": "5m"}


def get_json(url: str, data: dict | None = None) -> dict:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def prom_query(promql: str) -> list[dict]:
    url = f"{PROMETHEUS_URL}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    return get_json(url)["data"]["result"]


@pytest.fixture(scope="module")
def dashboard() -> list[tuple[str, str]]:
    """(panel, PromQL) of every dashboard query, with Grafana's interval variables set for 5 s scrapes; the compose
    cluster runs classic mode, so the controller-mode row has no series here (the exporter tests check its
    queries against a real Prometheus)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics_conftest, "GRAFANA_VARS", COMPOSE_GRAFANA_VARS)
        return metrics_conftest.dashboard_queries(skip_rows=(metrics_conftest.CONTROLLER_ROW,))


@pytest.fixture(scope="module")
def traffic(cluster):
    """Messages sent and consumed by a group, so the per-topic and per-group series exist."""
    topic, group = unique("sys_monitoring"), unique("sys_monitoring_group")
    run_async(await_whole, 60)  # SYNC_MASTER sends answer SEND_OK with a slave in sync
    ok("updateTopic", "-c", "DefaultCluster", "-t", topic)

    async def run() -> None:
        producer = Producer(unique("monitoring"), NAMESRV_ADDR)
        await producer.start()
        consumer = await RecordingConsumer(group, topic).start()
        try:
            for i in range(20):
                result = await producer.send(Message(topic, f"m{i}".encode()))
                assert result.status is SendStatus.SEND_OK, result
            await async_wait_until(lambda: len({d.id for d in consumer.deliveries}) == 20, 60,
                                   "the group consumed the 20 messages")
        finally:
            await consumer.stop()
            await producer.stop()

    run_async(run)
    return topic, group


def test_prometheus_scrapes_every_pyrmq_server(cluster):
    def up() -> dict[str, float]:
        return {r["metric"]["instance"]: float(r["value"][1]) for r in prom_query('up{job=~"pyrmq-.*"}')}

    wait_until(lambda: up() == {f"{s}:5557": 1.0 for s in SERVICES}, 60,
               lambda: f"Prometheus scrapes namesrv and the four brokers; up = {up()}", interval_s=1.0)


def test_every_dashboard_query_returns_series_from_the_compose_prometheus(whole, traffic, dashboard):
    def missing() -> list[str]:
        return [f"{title}: {expr}" for title, expr in dashboard if not prom_query(expr)]

    # rate() needs two scrapes (5 s apart) after the traffic's counters appeared.
    wait_until(lambda: not missing(), 90, lambda: "queries without series:\n" + "\n".join(missing()), interval_s=2.0)


def test_grafana_serves_the_provisioned_dashboard_with_data(cluster, traffic, dashboard):
    if not cluster.has_service("grafana"):
        pytest.skip("Grafana's image could not be pulled (no container registry answered): "
                    "deploy/images/monitoring.sh put it in the compose profile 'grafana'")
    served = get_json(f"{GRAFANA_URL}/api/dashboards/uid/pyrmq-cluster")["dashboard"]
    assert served["title"] == "pyrmq cluster"

    def frames_with_values(expr: str) -> int:
        query = {"refId": "A", "datasource": {"uid": "pyrmq-prometheus"}, "expr": expr, "instant": True}
        try:
            answer = get_json(f"{GRAFANA_URL}/api/ds/query", {"queries": [query], "from": "now-5m", "to": "now"})
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"Grafana refused {expr}: {exc.code} {exc.read()[:500]!r}") from None
        frames = answer["results"]["A"].get("frames", [])
        return sum(1 for f in frames if (cols := f.get("data", {}).get("values")) and all(len(c) for c in cols))

    def missing() -> list[str]:
        return [f"{title}: {expr}" for title, expr in dashboard if not frames_with_values(expr)]

    wait_until(lambda: not missing(), 90, lambda: "panels without data in Grafana:\n" + "\n".join(missing()),
               interval_s=2.0)
