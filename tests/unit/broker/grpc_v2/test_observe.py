"""broker.grpc_v2.observe: the v2 series keep the broker's series_limit label sets (the rest under _other) and
read the pop state at scrape time."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.grpc_v2.observe import V2Metrics
from broker.metrics import BrokerMetrics
from common.metrics import new_registry
from common.series_cap import OTHER


def _samples(registry, name: str) -> dict[tuple, float]:
    text = generate_latest(registry).decode()
    return {(s.labels.get("topic"), s.labels.get("consumer_group"), s.labels.get("is_retry")): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


def test_in_flight_gauge_keeps_the_largest_and_sums_the_rest_and_counters_are_capped():
    registry = new_registry(process_metrics=False)
    broker = BrokerMetrics(registry, cluster="c", broker_name="b", broker_id=0, role="SYNC_MASTER", series_limit=2)
    v2 = V2Metrics(broker)
    pop = SimpleNamespace(
        state=[1, 2, 3],
        inflight_by_topic=lambda: {("t1", "g", False): 5, ("t2", "g", True): 7, ("t3", "g", False): 1,
                                   ("t4", "h", False): 2},
        revive_lag=lambda: 4, revive_latency_ms=lambda: 0)
    v2.watch_pop(pop)
    assert _samples(registry, "rocketmq_consumer_inflight_messages") == {
        ("t2", "g", "true"): 7, ("t1", "g", "false"): 5, (OTHER, OTHER, "false"): 3}
    assert _samples(registry, "rocketmq_pop_checkpoints") == {(None, None, None): 3}
    for topic in ("a", "b", "c"):
        v2.on_revive(topic, "g", "PUT_OK")
    revived = _samples(registry, "rocketmq_pop_revive_retry_messages_total")
    assert sum(revived.values()) == 3 and len(revived) <= 3 and len({k[0] for k in revived} - {OTHER}) <= 2


def test_without_broker_metrics_every_call_is_a_no_op():
    v2 = V2Metrics(None)
    v2.on_rpc("SendMessage", 20000, 0.0)
    v2.on_record("ck", "t", "g", "PUT_OK")
    v2.on_revive("t", "g", "PUT_OK")
    v2.on_dlq("t", "g")
    v2.on_delivered("t", "g", 1, 10)
