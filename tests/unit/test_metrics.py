"""Metrics: the exposition text of each collector, batch histograms, constant labels and the /metrics server."""

from __future__ import annotations

import asyncio
import re
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client import Counter, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from broker.ha.status import HAStatus, MasterLinkStatus, SlaveLinkStatus
from broker.metrics import BrokerMetrics, StoreGauges
from broker.store.types import PutStatus
from common.metrics import BatchHistogram, const_labels, new_registry
from common.metrics_server import MetricsServer
from namesrv.metrics import NamesrvMetrics
from namesrv.route_table import DataVersion, RouteInfoManager, TopicConfig
from harness.waiting import async_wait_until


def samples(registry) -> dict[tuple[str, frozenset], float]:
    """{(sample name, frozenset(labels)): value} parsed back from the exposition text."""
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(registry, name: str, **labels: str) -> float | None:
    """The value of the one sample named ``name`` whose labels include ``labels``."""
    hits = [v for (n, ls), v in samples(registry).items() if n == name and set(labels.items()) <= ls]
    assert len(hits) <= 1, f"{name} {labels} matches {len(hits)} samples"
    return hits[0] if hits else None


def broker(role="SYNC_MASTER", broker_id=0, **kw):
    registry = new_registry(process_metrics=False)
    m = BrokerMetrics(registry, cluster="C1", broker_name="broker-a", broker_id=broker_id, role=role,
                      broker_addr="127.0.0.1:10911", **kw)
    return registry, m


# common.metrics -----------------------------------------------------------------------------------------------
def test_const_labels_are_added_to_every_sample_and_created_series_are_dropped():
    registry = new_registry(process_metrics=False)
    inner = const_labels(registry, {"cluster": "C1", "node_type": "broker"})
    Counter("demo_events", "demo", ["topic"], registry=inner).labels("T").inc(3)
    text = generate_latest(registry).decode()
    assert 'demo_events_total{cluster="C1",node_type="broker",topic="T"} 3.0' in text
    assert "_created" not in text


def test_batch_histogram_is_exact_for_uniform_and_mixed_batches():
    h = BatchHistogram("size_bytes", "demo", [10, 100])
    h.observe_batch([5, 6, 7])  # one bucket: the fast path
    h.observe_batch([5, 50, 500])  # three buckets: per value
    h.observe(100, count=2)  # an upper bound belongs to its bucket
    registry = new_registry(process_metrics=False)
    registry.register(h)
    assert value(registry, "size_bytes_bucket", le="10.0") == 4
    assert value(registry, "size_bytes_bucket", le="100.0") == 7
    assert value(registry, "size_bytes_bucket", le="+Inf") == 8
    assert value(registry, "size_bytes_count") == 8
    assert value(registry, "size_bytes_sum") == 5 + 6 + 7 + 5 + 50 + 500 + 200


async def test_metrics_server_serves_the_registry_on_port_0_and_stops():
    registry = new_registry()
    Counter("demo_hits", "demo", registry=registry).inc()
    server = MetricsServer(registry, host="127.0.0.1", port=0)
    await server.start()
    try:
        assert server.bound_port > 0

        def get(path):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.bound_port}{path}", timeout=5) as resp:
                return resp.status, resp.headers["Content-Type"], resp.read().decode()

        status, ctype, body = await asyncio.to_thread(get, "/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        assert "demo_hits_total 1.0" in body
        assert "process_cpu_seconds_total" in body  # the per-process registry has the standard collectors
        with pytest.raises(urllib.error.HTTPError) as err:
            await asyncio.to_thread(get, "/nope")
        err.value.close()
        assert err.value.code == 404
    finally:
        await server.stop()
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{server.bound_port}/metrics", None, 2)


async def test_metrics_server_says_which_port_is_taken():
    first = MetricsServer(new_registry(process_metrics=False), host="127.0.0.1", port=0)
    await first.start()
    try:
        second = MetricsServer(new_registry(process_metrics=False), host="127.0.0.1", port=first.bound_port)
        with pytest.raises(OSError, match=f"127.0.0.1:{first.bound_port}.*metricsPromExporterPort"):
            await second.start()
    finally:
        await first.stop()


# broker -------------------------------------------------------------------------------------------------------
COMMON = {"cluster": "C1", "node_type": "broker", "node_id": "broker-a", "broker_id": "0", "role": "SYNC_MASTER"}


def test_single_stored_shortcut_exposes_what_on_send_does():
    """The grouped single send's shortcut (first call per topic through on_send, then cached cells)."""
    reg_a, a = broker()
    reg_b, b = broker()
    for topic, size in (("T", 10), ("T", 5000), ("U", 1024), ("T", 2_000_000), ("U", 1)):
        a.on_send(topic, 1, size, PutStatus.PUT_OK)
        b.on_single_stored(topic, size)
    assert generate_latest(reg_a) == generate_latest(reg_b)
    assert value(reg_b, "rocketmq_messages_in_total", topic="T", **COMMON) == 3
    assert value(reg_b, "rocketmq_send_requests_total", status="PUT_OK") == 5


def test_send_counts_messages_bytes_sizes_and_status_per_batch():
    registry, m = broker()
    m.on_send("T", 3, 3000, PutStatus.PUT_OK, sizes=[1000, 1000, 1000])
    m.on_send("T", 2, 5100, PutStatus.FLUSH_SLAVE_TIMEOUT, sizes=[100, 5000])
    m.on_send("T", 1, 10, "SERVICE_NOT_AVAILABLE")  # refused: not produced
    m.on_send("T", 1, 2_000_000, "PUT_OK")  # one message: sizes may be omitted
    assert value(registry, "rocketmq_messages_in_total", topic="T", **COMMON) == 6
    assert value(registry, "rocketmq_throughput_in_total", topic="T", is_system="false") == 3000 + 5100 + 2_000_000
    assert value(registry, "rocketmq_message_size_bucket", topic="T", le="1024.0") == 4
    assert value(registry, "rocketmq_message_size_bucket", topic="T", le="524288.0") == 5
    assert value(registry, "rocketmq_message_size_bucket", topic="T", le="2097152.0") == 6
    assert value(registry, "rocketmq_message_size_count", topic="T") == 6
    assert value(registry, "rocketmq_send_results_total", status="PUT_OK") == 4
    assert value(registry, "rocketmq_send_results_total", status="FLUSH_SLAVE_TIMEOUT") == 2
    assert value(registry, "rocketmq_send_results_total", status="SERVICE_NOT_AVAILABLE") == 1
    assert value(registry, "rocketmq_send_requests_total", status="PUT_OK") == 2
    assert value(registry, "rocketmq_send_results_total", status="SLAVE_NOT_AVAILABLE") == 0  # present from the start


def test_a_batch_without_sizes_is_refused_rather_than_averaged():
    _, m = broker()
    with pytest.raises(ValueError, match="sizes="):
        m.on_send("T", 2, 200, PutStatus.PUT_OK)


def test_pull_send_back_and_sync_wait_counters():
    registry, m = broker()
    m.on_pull("T", "G", 4, 400, suggested_slave=True)
    m.on_pull("T", "G", 0, 0)
    m.on_sync_wait(0.002, PutStatus.PUT_OK)
    m.on_sync_wait(3.0, PutStatus.FLUSH_SLAVE_TIMEOUT)
    m.on_send_back("T", "G", 2)
    m.on_send_back("T", "G", 1, to_dlq=True)
    assert value(registry, "rocketmq_messages_out_total", topic="T", consumer_group="G") == 4
    assert value(registry, "rocketmq_throughput_out_total", topic="T", consumer_group="G") == 400
    assert value(registry, "rocketmq_pull_requests_total", found="false") == 1
    assert value(registry, "rocketmq_pull_slave_suggestions_total") == 1
    assert value(registry, "rocketmq_ha_sync_wait_seconds_bucket", le="0.0025") == 1
    assert value(registry, "rocketmq_ha_sync_wait_seconds_count") == 2
    assert value(registry, "rocketmq_ha_sync_timeouts_total") == 1
    assert value(registry, "rocketmq_send_back_messages_total", topic="T", consumer_group="G") == 3
    assert value(registry, "rocketmq_send_to_dlq_messages_total", topic="T", consumer_group="G") == 1
    m.on_slave_sync("all", True)  # a master has no slave sync: ignored
    assert value(registry, "rocketmq_slave_sync_last_success_timestamp_seconds") is None


def test_slave_sync_runs_and_last_success_on_a_slave():
    registry, m = broker(role="SLAVE", broker_id=1, clock_s=lambda: 1_700_000_000.0)
    assert value(registry, "rocketmq_slave_sync_last_success_timestamp_seconds") == 0
    m.on_slave_sync("topic_config", True)
    m.on_slave_sync("consumer_offsets", False)
    m.on_slave_sync("all", False)
    assert value(registry, "rocketmq_slave_sync_last_success_timestamp_seconds") == 0
    m.on_slave_sync("all", True)
    assert value(registry, "rocketmq_slave_sync_runs_total", step="consumer_offsets", outcome="failure") == 1
    assert value(registry, "rocketmq_slave_sync_runs_total", step="all", outcome="failure") == 1
    assert value(registry, "rocketmq_slave_sync_last_success_timestamp_seconds", role="SLAVE") == 1_700_000_000.0


def test_store_disk_and_master_ha_gauges_are_read_at_scrape_time(tmp_path):
    registry, m = broker(store_dir=tmp_path / "store")
    state = {"max": 1000}
    m.set_providers(
        store=lambda: StoreGauges(max_offset=state["max"], min_offset=0, flushed_offset=900, dispatched_offset=950,
                                  cq_files_open=12, cq_files_limit=4488, cq_files_parked=3),
        ha=lambda: HAStatus("SYNC_MASTER", state["max"], 0, connections_accepted=1, slaves=(
            SlaveLinkStatus("10.0.0.2:10911", 1, 700, state["max"] - 700, "OK", 0, 4096, 0, 0),)),
    )
    assert value(registry, "rocketmq_commitlog_max_offset_bytes", **COMMON) == 1000
    state["max"] = 5000  # nothing is cached between scrapes
    assert value(registry, "rocketmq_commitlog_max_offset_bytes") == 5000
    assert value(registry, "rocketmq_commitlog_min_offset_bytes") == 0
    assert value(registry, "rocketmq_storage_flush_behind_bytes", storage_type="local") == 4100
    assert value(registry, "rocketmq_storage_dispatch_behind_bytes") == 4050
    assert value(registry, "rocketmq_consume_queue_files_open") == 12
    assert value(registry, "rocketmq_consume_queue_files_limit") == 4488
    assert value(registry, "rocketmq_consume_queue_files_parked_total") == 3
    assert value(registry, "rocketmq_storage_size") > 0
    assert value(registry, "rocketmq_storage_capacity_bytes") >= value(registry, "rocketmq_storage_size")
    assert value(registry, "rocketmq_ha_connections") == 1
    assert value(registry, "rocketmq_ha_in_sync_slaves") == 1
    assert value(registry, "rocketmq_ha_slave_ack_offset_bytes", slave_addr="10.0.0.2:10911") == 700
    assert value(registry, "rocketmq_ha_slave_fall_behind_bytes", slave_addr="10.0.0.2:10911") == 4300
    assert value(registry, "rocketmq_ha_transfer_bytes_total", slave_addr="10.0.0.2:10911") == 4096
    assert value(registry, "rocketmq_broker_commitlog_diff", brokerIP="10.0.0.2:10911", broker="broker-a") == 4300
    assert value(registry, "rocketmq_ha_reconnects_total") == 1
    assert value(registry, "rocketmq_broker_info", broker_addr="127.0.0.1:10911") == 1


def test_slave_ha_series_read_the_typed_status_as_the_ha_service_writes_it():
    registry, m = broker(role="SLAVE", broker_id=1, clock_s=lambda: 1_700_000_003.0)
    client = MasterLinkStatus("127.0.0.1:10912", True, 500, last_read_timestamp=1_700_000_000_500,  # epoch ms
                              replicated_bytes=123, since_last_read_ms=2500, state="OK")
    m.set_providers(ha=lambda: HAStatus("SLAVE", 500, 0, client=client, reconnects=2))
    slave = {"role": "SLAVE", "broker_id": "1"}
    assert value(registry, "rocketmq_ha_connected", **slave) == 1
    assert value(registry, "rocketmq_ha_master_last_read_timestamp_seconds") == 1_700_000_000.5
    assert value(registry, "rocketmq_ha_master_last_read_age_seconds") == 2.5
    assert value(registry, "rocketmq_ha_replicated_bytes_total") == 123
    assert value(registry, "rocketmq_ha_reconnects_total") == 2
    assert value(registry, "rocketmq_ha_connections") is None  # master-only series stay off a slave


def test_a_slave_that_never_read_from_its_master_has_age_minus_one():
    registry, m = broker(role="SLAVE", broker_id=1, clock_s=lambda: 1_700_000_003.0)
    m.set_providers(ha=lambda: HAStatus("SLAVE", 0, 0, client=MasterLinkStatus("127.0.0.1:10912")))
    assert value(registry, "rocketmq_ha_connected") == 0
    assert value(registry, "rocketmq_ha_master_last_read_timestamp_seconds") == 0
    assert value(registry, "rocketmq_ha_master_last_read_age_seconds") == -1


def test_master_ha_series_skip_disconnected_and_stale_slaves_from_the_in_sync_count():
    registry, m = broker()
    rows = (
        SlaveLinkStatus("127.0.0.1:10921", 1, 10, 5, "OK", 0, 99, 0, 0),
        SlaveLinkStatus("127.0.0.1:10931", 2, -1, 900, "DISCONNECTED", -1, 7, 0, 0),
        SlaveLinkStatus("127.0.0.1:10941", 3, 10, 5, "STALE", 0, 9, 0, 0),
    )
    m.set_providers(ha=lambda: HAStatus("SYNC_MASTER", 15, 0, rows, connections_accepted=5))
    assert value(registry, "rocketmq_ha_connections") == 2  # a STALE slave is still connected
    assert value(registry, "rocketmq_ha_in_sync_slaves") == 1
    assert value(registry, "rocketmq_ha_slave_fall_behind_bytes", slave_broker_id="2") == 900  # still growing
    assert value(registry, "rocketmq_ha_slave_ack_offset_bytes", slave_addr="127.0.0.1:10931") == 0
    assert value(registry, "rocketmq_ha_transfer_bytes_total", slave_broker_id="1") == 99
    assert value(registry, "rocketmq_ha_reconnects_total") == 5  # a master counts accepted connections


async def test_timed_replica_waiter_observes_each_wait_once():
    registry, m = broker()

    async def waiter(next_offset):
        return (PutStatus.FLUSH_SLAVE_TIMEOUT if next_offset > 100 else PutStatus.PUT_OK), ""

    timed = m.timed_replica_waiter(waiter)
    assert await timed(50) == (PutStatus.PUT_OK, "")
    assert await timed(500) == (PutStatus.FLUSH_SLAVE_TIMEOUT, "")
    assert value(registry, "rocketmq_ha_sync_wait_seconds_count") == 2
    assert value(registry, "rocketmq_ha_sync_timeouts_total") == 1


def test_consumer_lag_and_latency_are_computed_from_offsets_at_scrape_time():
    registry, m = broker(clock_s=lambda: 100.0)
    offsets = {"T@G": {0: 3, 1: 10}, "%RETRY%G@G": {0: 0}}
    max_offsets = {("T", 0): 10, ("T", 1): 10, ("%RETRY%G", 0): 0}
    m.set_providers(
        consumer_offsets=lambda: offsets,
        queue_max_offset=lambda topic, q: max_offsets[(topic, q)],
        queue_store_timestamp=lambda topic, q, off: 95_000 if (topic, q, off) == ("T", 0, 3) else 0,
    )
    assert value(registry, "rocketmq_consumer_lag_messages", topic="T", consumer_group="G", is_retry="false") == 7
    assert value(registry, "rocketmq_consumer_lag_latency_milliseconds", topic="T", consumer_group="G") == 5000
    assert value(registry, "rocketmq_consumer_lag_messages", topic="%RETRY%G", is_retry="true") == 0
    offsets["T@G"][0] = 10
    assert value(registry, "rocketmq_consumer_lag_messages", topic="T", consumer_group="G") == 0
    assert value(registry, "rocketmq_consumer_lag_latency_milliseconds", topic="T", consumer_group="G") == 0


def test_a_failing_provider_drops_its_series_but_not_the_page():
    registry, m = broker()

    def broken():
        raise RuntimeError("store is closing")

    m.set_providers(store=broken)
    m.on_send("T", 1, 10, PutStatus.PUT_OK)
    text = generate_latest(registry).decode()
    assert "rocketmq_messages_in_total" in text
    assert "rocketmq_commitlog_max_offset_bytes" not in text


def test_every_series_name_follows_the_naming_rules():
    registry, m = broker(store_dir="/")
    m.set_providers(store=lambda: StoreGauges(1, 0, 1, 1),
                    ha=lambda: HAStatus("SYNC_MASTER", 1, 0, (SlaveLinkStatus("s:1", 1, 1, 0, "OK", 0, 0, 0, 0),)))
    m.on_send("T", 1, 10, PutStatus.PUT_OK)
    m.on_pull("T", "G", 1, 10)
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        assert family.name.startswith(("rocketmq_", "process_", "python_")), family.name
        assert re.fullmatch(r"[a-z_]+", family.name), family.name
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
        for s in family.samples:
            assert {"cluster", "node_type", "node_id", "broker_id", "role"} <= set(s.labels), s


# namesrv ------------------------------------------------------------------------------------------------------
def test_namesrv_metrics_read_the_route_table_at_scrape_time():
    table = RouteInfoManager()
    now = {"ms": 10_000}
    registry = new_registry(process_metrics=False)
    m = NamesrvMetrics(registry, node_id="127.0.0.1:9876", route_table=table, clock_ms=lambda: now["ms"],
                       broker_connections=lambda: 2)
    for bid, port in ((0, 10911), (1, 10921)):
        table.register_broker(cluster="C1", broker_name="broker-a", broker_addr=f"127.0.0.1:{port}", broker_id=bid,
                              ha_server_addr="", data_version=DataVersion(1, 1), topic_configs=[TopicConfig("T")],
                              now_ms=7_000)
        m.on_register(bid)
    m.on_register(0, ok=False)
    m.on_route_query("found")
    m.on_expired("silence")
    common = {"node_type": "namesrv", "node_id": "127.0.0.1:9876"}
    assert value(registry, "rocketmq_namesrv_live_brokers", broker_cluster="C1", role="MASTER", **common) == 1
    assert value(registry, "rocketmq_namesrv_live_brokers", broker_cluster="C1", role="SLAVE") == 1
    assert value(registry, "rocketmq_namesrv_broker_groups", broker_cluster="C1") == 1
    assert value(registry, "rocketmq_namesrv_broker_heartbeat_age_seconds", broker_id="1") == 3.0
    assert value(registry, "rocketmq_namesrv_topics") == 1
    assert value(registry, "rocketmq_namesrv_broker_connections") == 2
    assert value(registry, "rocketmq_namesrv_registrations_total", role="SLAVE", result="ok") == 1
    assert value(registry, "rocketmq_namesrv_registrations_total", role="MASTER", result="invalid") == 1
    assert value(registry, "rocketmq_namesrv_route_queries_total", result="found") == 1
    assert value(registry, "rocketmq_namesrv_route_queries_total", result="not_found") == 0
    assert value(registry, "rocketmq_namesrv_broker_expiries_total", reason="silence") == 1
    assert value(registry, "rocketmq_namesrv_broker_expiries_total", reason="channel_closed") == 0
    table.on_channel_destroy("127.0.0.1:10921")
    assert value(registry, "rocketmq_namesrv_live_brokers", broker_cluster="C1", role="SLAVE") == 0


async def test_attach_reads_a_real_message_store_and_offset_table(tmp_path):
    from broker.config import MessageStoreConfig
    from broker.metadata.consumer_offsets import ConsumerOffsetManager
    from broker.store.message_store import MessageStore
    from broker.store.types import MessageDraft

    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"),
                                            mapped_file_size_commit_log=1024 * 1024,
                                            mapped_file_size_consume_queue=20 * 1000))
    await store.start()
    try:
        registry, m = broker(store_dir=tmp_path / "store")
        offsets = ConsumerOffsetManager(tmp_path / "store" / "config")
        m.attach(store=store, offsets=offsets)
        result = await store.put_messages("T", 0, [MessageDraft(body=b"x" * 100) for _ in range(5)])
        assert result.status.stored
        offsets.commit("G", "T", 0, 2)

        def lag():
            return value(registry, "rocketmq_consumer_lag_messages", topic="T", consumer_group="G")

        # the dispatcher builds the consume queue asynchronously
        await async_wait_until(lambda: lag() == 3, 10, lambda: f"a consumer lag of 3 messages; it is {lag()}")
        assert value(registry, "rocketmq_commitlog_max_offset_bytes") == store.max_phy_offset > 0
        assert value(registry, "rocketmq_consumer_lag_latency_milliseconds", topic="T", consumer_group="G") >= 0
        assert value(registry, "rocketmq_storage_dispatch_behind_bytes") == 0
    finally:
        await store.stop()


# bounded cardinality (issue 12 item 4) ------------------------------------------------------------------------
def series_of(registry, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples(registry).items() if n == name}


def topic_values(registry, name: str) -> dict[str, float]:
    return {dict(labels)["topic"]: v for labels, v in series_of(registry, name).items()}


def test_below_the_series_limit_every_topic_is_exact_and_there_is_no_other_series():
    registry, m = broker(series_limit=5)
    for i in range(5):
        m.on_send(f"T{i}", i + 1, 10 * (i + 1), PutStatus.PUT_OK, sizes=[10] * (i + 1))
    assert topic_values(registry, "rocketmq_messages_in_total") == {f"T{i}": i + 1 for i in range(5)}
    sample_lines = [line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")]
    assert not [line for line in sample_lines if 'topic="_other"' in line]


def test_beyond_the_limit_the_busiest_topics_keep_series_and_the_rest_sum_under_other():
    registry, m = broker(series_limit=10)
    for i in range(200):  # one-message topics, then ten busy ones
        m.on_send(f"auto-{i}", 1, 100, PutStatus.PUT_OK)
    for i in range(10):
        m.on_send(f"busy-{i}", 50, 5000, PutStatus.PUT_OK, sizes=[100] * 50)
    values = topic_values(registry, "rocketmq_messages_in_total")
    assert set(values) == {f"busy-{i}" for i in range(10)} | {"_other"}
    assert sum(values.values()) == 200 + 10 * 50  # the total is exact
    throughput = topic_values(registry, "rocketmq_throughput_in_total")
    assert set(throughput) == set(values) and sum(throughput.values()) == 200 * 100 + 10 * 5000  # same topics kept
    size_counts = topic_values(registry, "rocketmq_message_size_count")
    assert set(size_counts) == set(values) and sum(size_counts.values()) == 700
    text = generate_latest(registry).decode()
    assert 'summed under topic="_other"' in text  # the help says so


def test_counters_stay_monotonic_and_exact_while_the_kept_topics_follow_the_traffic():
    registry, m = broker(series_limit=3)
    previous: dict[frozenset, float] = {}
    total = 0
    for round_ in range(12):
        hot = [f"T{(round_ + k) % 8}" for k in range(3)]  # the busy topics move every round
        for topic in [f"T{i}" for i in range(8)]:
            n = 20 if topic in hot else 1
            m.on_send(topic, n, n, PutStatus.PUT_OK, sizes=[1] * n)
            m.on_pull(topic, "g", n, n)
            total += n
        now = series_of(registry, "rocketmq_messages_in_total")
        for labels, v in now.items():
            assert v >= previous.get(labels, 0), (round_, dict(labels), v, previous.get(labels))
        assert sum(now.values()) == total
        assert len(now) <= 3 + 1
        kept = {dict(labels)["topic"] for labels in now} - {"_other"}
        if round_ > 0:
            assert set(hot) <= kept  # a topic twice as busy replaces a slow one
        previous = now
        out = series_of(registry, "rocketmq_messages_out_total")
        assert sum(out.values()) == total and len(out) <= 3 + 1


def test_consumer_lag_keeps_the_largest_lags_and_sums_the_rest():
    registry, m = broker(series_limit=3)
    offsets = {f"T{i}@g{i}": {0: 0} for i in range(10)}
    m.set_providers(consumer_offsets=lambda: offsets, queue_max_offset=lambda topic, qid: int(topic[1:]) + 1,
                    queue_store_timestamp=lambda topic, qid, offset: 1)
    lag = topic_values(registry, "rocketmq_consumer_lag_messages")
    assert lag == {"T9": 10, "T8": 9, "T7": 8, "_other": sum(range(1, 8))}
    assert set(topic_values(registry, "rocketmq_consumer_lag_latency_milliseconds")) == {"T9", "T8", "T7"}


async def test_a_scrape_renders_off_the_event_loop():
    """Rendering iterates the samples; here that waits for the loop to run a task. Rendered on the loop (as before),
    the loop could never run it and the scrape would fail after the wait."""
    rendering, loop_ran = threading.Event(), threading.Event()

    class BlockingSamples(list):
        def __iter__(self):
            rendering.set()
            assert loop_ran.wait(10), "the loop did not run while the scrape was being rendered"
            return super().__iter__()

    class Slow:
        def collect(self):
            family = GaugeMetricFamily("slow_render", "A family whose rendering needs the loop to be free.")
            family.add_metric([], 1)
            family.samples = BlockingSamples(family.samples)
            yield family

    registry = new_registry(process_metrics=False)
    registry.register(Slow())
    server = MetricsServer(registry, host="127.0.0.1", port=0)
    await server.start()
    try:
        scrape = asyncio.ensure_future(asyncio.to_thread(fetch_text, server.url))
        await async_wait_until(rendering.is_set, 10, "the scrape never started rendering")
        loop_ran.set()  # reached only if the loop is free while the scrape is being rendered
        assert "slow_render 1.0" in await asyncio.wait_for(scrape, 15)
    finally:
        await server.stop()


def fetch_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=15) as resp:
        return resp.read().decode()


async def test_metrics_server_refuses_other_methods_and_answers_head(tmp_path):
    server = MetricsServer(new_registry(process_metrics=False), host="127.0.0.1", port=0)
    await server.start()
    try:
        def request(method):
            req = urllib.request.Request(server.url, method=method)
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as err:
                err.close()
                return err.code, b""

        assert await asyncio.to_thread(request, "POST") == (405, b"")
        status, body = await asyncio.to_thread(request, "HEAD")
        assert status == 200 and body == b""
    finally:
        await server.stop()
