"""Consumer lag at scrape time: ``rocketmq_consumer_lag_messages`` and ``..._lag_latency_milliseconds``.

Why a module of its own: lag is the one broker family computed by walking a table (every topic and group of the
consumer offset table against every queue's max offset) and then capped by ranking (the ``series_limit``
largest lags keep series of their own, the rest are summed under ``_other``), with a bounded number of store
reads for the latency. That walk, the ranking and the cap are this module's job; ``metrics.BrokerMetrics``
registers it and feeds it providers, and it can be driven with plain callables.

The walk reads loop-owned state, so it runs where the collection runs (on the loop); inside the metrics server's
snapshot the rest (the ``_other`` sums, labels, families) is deferred to its thread (``common.metrics.Deferred``).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from broker.metadata.topics import is_system_topic
from common.metrics import Deferred, deferring_now, label_value
from common.series_cap import OTHER
from remoting.message_codec import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

# At most this many lagging queues get a store read for the lag latency per scrape.
LAG_LATENCY_MAX_READS = 2000

OffsetTableProvider = Callable[[], Mapping[str, Mapping[int, int]]]  # "topic@group" -> {queue_id: offset}
QueueMaxOffset = Callable[[str, int], int]
QueueStoreTimestamp = Callable[[str, int, int], int]  # (topic, queue_id, offset) -> store time, epoch ms; 0 unknown


def is_system_label(topic: str) -> bool:
    """The ``is_system`` label of a topic: RocketMQ's system topics and every %DLQ% topic."""
    return is_system_topic(topic) or topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


class ConsumerLag:
    """The lag collector. ``set_providers`` may be called at any time (``None`` leaves a provider unchanged);
    without an offset table and queue max offsets it exports nothing, without store timestamps no latency."""

    def __init__(self, series_limit: int, clock_s: Callable[[], float] = time.time) -> None:
        self.series_limit = series_limit
        self._clock_s = clock_s
        self._offsets: OffsetTableProvider | None = None
        self._queue_max: QueueMaxOffset | None = None
        self._queue_ts: QueueStoreTimestamp | None = None
        self._flags: dict[str, tuple[str, str]] = {}

    def set_providers(
        self,
        *,
        consumer_offsets: OffsetTableProvider | None = None,
        queue_max_offset: QueueMaxOffset | None = None,
        queue_store_timestamp: QueueStoreTimestamp | None = None,
    ) -> None:
        self._offsets = consumer_offsets or self._offsets
        self._queue_max = queue_max_offset or self._queue_max
        self._queue_ts = queue_store_timestamp or self._queue_ts

    def topic_flags(self, topic: str) -> tuple[str, str]:
        """``is_retry`` and ``is_system`` label values of a topic (cached: the lag scrape asks for every topic)."""
        flags = self._flags.get(topic)
        if flags is None:
            flags = self._flags[topic] = (label_value(topic.startswith(RETRY_GROUP_TOPIC_PREFIX)),
                                          label_value(is_system_label(topic)))
        return flags

    def collect(self) -> Iterable[Metric | Deferred]:
        """Lag of every (topic, group) from the offset table; series for the ``series_limit`` largest, the rest
        summed under ``_other``. The latency needs a store read per lagging queue, so only the kept pairs get one
        (at most ``LAG_LATENCY_MAX_READS`` per scrape).

        What reads loop-owned state (the offset table, the queues' max offsets, the store reads) runs where the
        collection runs: on the loop, per pair one subtraction per queue. Inside the metrics server's snapshot the
        rest (the ``_other`` sums, labels, families) is deferred to its thread."""
        if self._offsets is None or self._queue_max is None:
            return []
        queue_max = self._queue_max
        pairs: list[tuple[int, str, list[tuple[int, int]] | None]] = []
        for key, queues in self._offsets().items():
            topic = key.rpartition("@")[0]
            lag, behind_queues = 0, None
            for queue_id, committed in queues.items():
                behind = queue_max(topic, queue_id) - committed
                if behind > 0:
                    lag += behind
                    if behind_queues is None:
                        behind_queues = []
                    behind_queues.append((queue_id, committed))
            pairs.append((lag, key, behind_queues))
        kept = heapq.nlargest(self.series_limit, pairs, key=itemgetter(0))  # as a stable sort by lag, descending
        latencies: list[int] | None = None
        if self._queue_ts is not None:
            now_ms = int(self._clock_s() * 1000)
            reads, latencies = 0, []
            for _lag, key, behind_queues in kept:
                topic = key.rpartition("@")[0]
                oldest_ms = 0
                for queue_id, committed in behind_queues or ():
                    if reads >= LAG_LATENCY_MAX_READS:
                        break
                    reads += 1
                    ts = self._queue_ts(topic, queue_id, committed)
                    if ts > 0:
                        oldest_ms = max(oldest_ms, now_ms - ts)
                latencies.append(max(0, oldest_ms))

        def finish() -> list[Metric]:
            return self._lag_families(pairs, kept, latencies)

        return [Deferred(finish)] if deferring_now() else finish()

    def _lag_families(self, pairs: list, kept: list, latencies: list[int] | None) -> list[Metric]:
        labels = ["topic", "consumer_group", "is_retry", "is_system"]
        lag_family = GaugeMetricFamily("rocketmq_consumer_lag_messages",
                                       "Messages not yet consumed: queue max offset minus committed offset. At most "
                                       f"{self.series_limit} topic and group pairs (the largest lags) have series "
                                       f'of their own; the others are summed under topic="{OTHER}",'
                                       f'consumer_group="{OTHER}".', labels=labels)
        latency_family = GaugeMetricFamily("rocketmq_consumer_lag_latency_milliseconds",
                                           "Age of the oldest unconsumed message (0 when caught up), for the topic "
                                           "and group pairs that have a series of their own in "
                                           "rocketmq_consumer_lag_messages.", labels=labels)
        for i, (lag, key, _behind) in enumerate(kept):
            topic, _, group = key.rpartition("@")
            values = [topic, group, *self.topic_flags(topic)]
            lag_family.add_metric(values, lag)
            if latencies is not None:
                latency_family.add_metric(values, latencies[i])
        kept_ids = {id(pair) for pair in kept}
        other: dict[tuple[str, str], int] = {}
        for pair in pairs:
            if id(pair) not in kept_ids:
                flags = self.topic_flags(pair[1].rpartition("@")[0])
                other[flags] = other.get(flags, 0) + pair[0]
        for (is_retry, is_system), lag in sorted(other.items()):
            lag_family.add_metric([OTHER, OTHER, is_retry, is_system], lag)
        return [lag_family, latency_family] if latencies is not None else [lag_family]
