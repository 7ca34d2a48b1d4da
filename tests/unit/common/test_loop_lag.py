"""The event-loop lag probe (issue 22 item 7): it keeps observing while it runs, stops with its service, and the
broker exports its histogram with the broker's labels. No figure is asserted: lateness is the machine's."""

from __future__ import annotations

from prometheus_client import generate_latest

from broker.metrics import BrokerMetrics
from common.loop_lag import LOOP_LAG_BUCKETS, LoopLagProbe, loop_lag_histogram
from common.metrics import new_registry
from harness.waiting import async_wait_until


def probes(histogram) -> float:
    rows = histogram.rows()
    return sum(sum(row[:-1]) for row in rows.values())


async def test_the_probe_observes_until_stopped():
    histogram = loop_lag_histogram()
    probe = LoopLagProbe(histogram, interval_s=0.01)
    await probe.start()
    try:
        await async_wait_until(lambda: probes(histogram) >= 3, 10, lambda: f"{probes(histogram)} probes")
    finally:
        await probe.stop()
    stopped_at = probes(histogram)
    await LoopLagProbe(loop_lag_histogram(), interval_s=0.01).stop()  # stopping an unstarted probe is harmless
    assert probes(histogram) == stopped_at


def test_the_broker_exports_the_lag_histogram_with_its_labels_before_the_first_probe():
    registry = new_registry(process_metrics=False)
    BrokerMetrics(registry, cluster="c", broker_name="b", broker_id=0, role="ASYNC_MASTER")
    text = generate_latest(registry).decode()
    buckets = [line for line in text.splitlines() if line.startswith("rocketmq_event_loop_lag_seconds_bucket{")]
    assert len(buckets) == len(LOOP_LAG_BUCKETS) + 1 and all('node_id="b"' in line for line in buckets)
