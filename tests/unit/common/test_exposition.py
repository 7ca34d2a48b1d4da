"""The /metrics renderer (issue 22 item 7): byte for byte prometheus_client's text, from a snapshot whose finishing
and rendering hand the GIL over at bounded steps and read only copies of the live state."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Info, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily

from broker.metrics import BrokerMetrics, StoreGauges
from common.exposition import PAUSE_EVERY, Labelled, TextRenderer
from common.metrics import BatchHistogram, LoopCounter, const_labels, deferring, finish_all, new_registry


def registry_with_everything():
    registry = new_registry(process_metrics=False)
    inner = const_labels(registry, {"cluster": "c", "node_type": "broker", "role": "SLAVE"})
    plain = Counter("plain_requests", "A prometheus_client counter (its _created sample is dropped).", ["kind"],
                    registry=inner)
    plain.labels("a").inc(3)
    plain.labels('we"ird\\one\nline').inc()
    Gauge("a_gauge", "Help with a backslash \\ and\na newline.", registry=inner).set(1.5e-7)
    Info("build", "An info metric.", registry=inner).info({"version": "1.0"})
    role = Gauge("own_role", "A sample's own label wins over the constant.", ["role"], registry=inner)
    role.labels("MASTER").set(2)
    loop = LoopCounter("loop_events", "A loop counter.", ["topic"])
    loop.inc(5, "t\u00e9")
    inner.register(loop)
    hist = BatchHistogram("sizes", "A batch histogram.", [1, 10, 100], ["topic"])
    hist.observe_batch([0.5, 5, 50, 500], ("t",))
    inner.register(hist)
    bare = Counter("bare_total", "Outside the constant labels, with its _created sample.", registry=registry)
    bare.inc()
    return registry


def snapshot_text(registry, renderer: TextRenderer | None = None, pause=None) -> bytes:
    with deferring():
        collected = list(registry.collect())
    return (renderer or TextRenderer()).render(finish_all(collected, pause), pause)


def test_a_snapshot_renders_exactly_what_generate_latest_writes():
    registry = registry_with_everything()
    renderer = TextRenderer()
    expected = generate_latest(registry)
    assert b'plain_requests_total{cluster="c",kind="we\\"ird\\\\one\\nline"' in expected  # the escaping is covered
    assert snapshot_text(registry, renderer) == expected
    assert snapshot_text(registry, renderer) == expected  # the second time from the remembered prefixes


def test_a_broker_page_renders_as_generate_latest_does():
    registry = new_registry(process_metrics=False)
    metrics = BrokerMetrics(registry, cluster="c", broker_name="b", broker_id=0, role="SYNC_MASTER",
                            broker_addr="127.0.0.1:1", series_limit=5, clock_s=lambda: 1000.0)
    offsets = {}
    for i in range(12):
        metrics.on_send(f"T{i}", 1 + i, 100 * (i + 1), "PUT_OK", sizes=[100] * (1 + i))
        metrics.on_pull(f"T{i}", f"g{i}", 1, 10)
        offsets[f"T{i}@g{i}"] = {0: 0, 1: i}
    metrics.set_providers(store=lambda: StoreGauges(100, 0, 90, 80), consumer_offsets=lambda: offsets,
                          queue_max_offset=lambda topic, qid: 20, queue_store_timestamp=lambda t, q, o: 999_000)
    rendered = snapshot_text(registry)  # the caps select once per scrape: compare with a second, plain scrape
    assert rendered == generate_latest(registry)
    assert b'topic="_other"' in rendered and b"rocketmq_consumer_lag_latency_milliseconds{" in rendered


def test_the_renderer_pauses_every_few_hundred_samples_and_after_each_deferred_step():
    registry = new_registry(process_metrics=False)
    inner = const_labels(registry, {"cluster": "c"})
    family = LoopCounter("many", "Many series.", ["n"])
    for i in range(5 * PAUSE_EVERY):
        family.inc(1, str(i))
    inner.register(family)
    pauses = []
    snapshot_text(registry, pause=lambda: pauses.append(1))
    assert len(pauses) >= 5 + 1  # five in rendering, at least one after the deferred ConstLabels step


def test_deferred_work_reads_the_copies_taken_on_the_loop_not_the_live_state():
    """What runs in the server thread must not see (or race with) updates the loop makes after the snapshot."""
    registry = new_registry(process_metrics=False)
    metrics = BrokerMetrics(registry, cluster="c", broker_name="b", broker_id=0, role="ASYNC_MASTER",
                            series_limit=2)
    offsets = {"A@g": {0: 0}, "B@g": {0: 0}, "C@g": {0: 0}}
    maxes = {"A": 5, "B": 3, "C": 1}
    metrics.set_providers(consumer_offsets=lambda: offsets, queue_max_offset=lambda topic, qid: maxes[topic])
    for topic in "ABC":
        metrics.on_send(topic, 1, 10, "PUT_OK")
    with deferring():
        collected = list(registry.collect())
    for topic in "ABCDE":  # after the snapshot: more traffic, new topics and groups, other lags
        metrics.on_send(topic, 100, 1000, "PUT_OK", sizes=[10] * 100)
    offsets["D@g"] = {0: 0}
    maxes.update(A=0, D=50)
    text = TextRenderer().render(finish_all(collected)).decode()
    assert 'rocketmq_messages_in_total{' in text and 'topic="D"' not in text and 'topic="E"' not in text
    lag = {line.split('topic="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
           for line in text.splitlines() if line.startswith("rocketmq_consumer_lag_messages{")}
    assert lag == {"A": "5.0", "B": "3.0", "_other": "1.0"}
    messages_in = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("rocketmq_messages_in_total{"))
    assert messages_in == 3


def test_the_prefix_cache_is_bounded():
    renderer = TextRenderer(cache_max=10)
    for round_ in range(5):
        family = GaugeMetricFamily("g", "Churning label sets.", labels=["k"])
        for i in range(8):
            family.add_metric([f"{round_}-{i}"], i)
        renderer.render([Labelled(family, {"c": "x"})])
        assert renderer.cached_series <= 10 + 8
