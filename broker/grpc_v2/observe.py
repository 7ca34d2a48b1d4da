"""The v2 endpoint's Prometheus series, registered in the broker's registry (``BrokerMetrics.registry``, so they
carry the broker's common labels). Names are RocketMQ 5's (spec/operator-conventions.md §4.3, with the unit
suffix its OTel exporter appends), ``V2Metrics`` is a no-op when the broker exports no metrics.

* ``rocketmq_rpc_latency_milliseconds{protocol_type="grpc",request_code=<RPC>,response_code=<v2 Code>,
  is_long_polling}``: every v2 call (Telemetry streams excepted), as RocketMQ's ``rocketmq_rpc_latency``.
* Pop state, computed at scrape time from the pop index: ``rocketmq_consumer_inflight_messages{topic,
  consumer_group,is_retry,is_system}`` (received, not acked, not yet revived; ``topic`` is the subscribed topic,
  ``is_retry`` marks redeliveries held in the group's pop retry topic), ``rocketmq_pop_checkpoints`` (checkpoints
  held), ``rocketmq_pop_revive_lag{queue_id}`` (revive-queue records after the committed revive offset) and
  ``rocketmq_pop_revive_latency_milliseconds{queue_id}`` (how far past its revive time the most overdue
  checkpoint is; 0 when revive keeps up).
* Counters: ``rocketmq_pop_revive_in_message_total{topic,consumer_group,revive_message_type=CK|ACK,put_status}``
  (records written to the revive topic), ``rocketmq_pop_revive_retry_messages_total{topic,consumer_group,
  put_status}`` (un-acked messages re-put to the pop retry topic), the broker's ``rocketmq_send_to_dlq_messages_total``
  (revived past retryMaxTimes, or forwarded by the client) and ``rocketmq_messages_out_total`` /
  ``rocketmq_throughput_out_total`` (messages a receive handed out).

Families labelled by topic and group keep the broker's ``series_limit`` busiest (or largest) label sets and sum
the rest under ``_other``, as ``broker.metrics`` does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.metadata.topics import is_system_topic
from common.metrics import BatchHistogram, LoopCounter, ScrapeCollector, label_value
from common.series_cap import OTHER, CappedGroup, SeriesCap

# RocketMQ 5's rocketmq_rpc_latency buckets (ms)
RPC_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
REVIVE_QUEUE_ID = "0"


_CODE_NAMES = {v.number: v.name for v in pb.Code.DESCRIPTOR.values}  # looked up on every call: a dict, not Name()


def code_name(code: int) -> str:
    return _CODE_NAMES.get(code) or str(code)


class V2Metrics:
    def __init__(self, broker_metrics) -> None:
        self.broker = broker_metrics  # broker.metrics.BrokerMetrics, or None: every method is a no-op
        self.rpc = self.revive_in = self.revive_retry = None
        self._pop = None  # PopService, read at scrape time
        if broker_metrics is None:
            return
        reg = broker_metrics.registry
        self.rpc = BatchHistogram("rocketmq_rpc_latency_milliseconds", "RocketMQ 5 (gRPC v2) calls answered, by RPC"
                                  " and v2 status code.", RPC_BUCKETS_MS,
                                  ["protocol_type", "request_code", "response_code", "is_long_polling"])
        self.revive_in = LoopCounter("rocketmq_pop_revive_in_message", "Pop checkpoint and ack records written to"
                                     " the revive topic.", ["topic", "consumer_group", "revive_message_type",
                                                            "put_status"])
        self.revive_retry = LoopCounter("rocketmq_pop_revive_retry_messages", "Un-acked popped messages re-put to"
                                        " the group's pop retry topic.", ["topic", "consumer_group", "put_status"])
        # topic- and group-labelled families keep the broker's series_limit busiest label sets (the rest: _other)
        self.limit = broker_metrics.series_limit
        reg.register(self.rpc)
        for family in (self.revive_in, self.revive_retry):
            cap = SeriesCap(self.limit, family.labelnames, ["topic", "consumer_group"])
            reg.register(CappedGroup(cap, family, [family]))
        reg.register(ScrapeCollector("pop-state", self._collect_pop))

    def watch_pop(self, pop) -> None:
        self._pop = pop

    # calls ---------------------------------------------------------------------------------------------------
    def on_rpc(self, rpc: str, code: int, started: float, long_polling: bool = False) -> None:
        if self.rpc is not None:
            ms = (time.perf_counter() - started) * 1000
            self.rpc.observe(ms, 1, ("grpc", rpc, code_name(code), label_value(long_polling)))

    # pop -----------------------------------------------------------------------------------------------------
    def on_record(self, kind: str, topic: str, group: str, status: object) -> None:
        """A ck or ack record written (``status``: the store's PutStatus)."""
        if self.revive_in is not None:
            self.revive_in.inc(1, topic, group, kind.upper(), label_value(status))

    def on_revive(self, topic: str, group: str, status: str) -> None:
        if self.revive_retry is not None:
            self.revive_retry.inc(1, topic, group, status)

    def on_dlq(self, topic: str, group: str) -> None:
        if self.broker is not None:
            self.broker.send_to_dlq.inc(1, topic, group, label_value(is_system_topic(topic)))

    def on_delivered(self, topic: str, group: str, count: int, total_bytes: int) -> None:
        if self.broker is not None and count:
            labels = (topic, group, label_value(is_system_topic(topic)))
            self.broker.messages_out.inc(count, *labels)
            self.broker.throughput_out.inc(total_bytes, *labels)

    def _collect_pop(self) -> Iterable[Metric]:
        pop = self._pop
        if pop is None:
            return []
        labels = ["topic", "consumer_group", "is_retry", "is_system"]
        inflight = GaugeMetricFamily("rocketmq_consumer_inflight_messages", "Messages received by pop consumers"
                                     " and neither acked nor revived yet.", labels=labels)
        rows = sorted(pop.inflight_by_topic().items(), key=lambda kv: -kv[1])
        other: dict[bool, int] = {}
        for i, ((topic, group, is_retry), n) in enumerate(rows):
            if i < self.limit:  # the largest; the rest summed under _other, as the broker's lag series
                inflight.add_metric([topic, group, label_value(is_retry), label_value(is_system_topic(topic))], n)
            else:
                other[is_retry] = other.get(is_retry, 0) + n
        for is_retry, n in other.items():
            inflight.add_metric([OTHER, OTHER, label_value(is_retry), "false"], n)
        checkpoints = GaugeMetricFamily("rocketmq_pop_checkpoints", "Pop checkpoints held (some message of the"
                                        " batch neither acked nor revived).", len(pop.state))
        lag = GaugeMetricFamily("rocketmq_pop_revive_lag", "Revive-queue records after the committed revive"
                                " offset.", labels=["queue_id"])
        lag.add_metric([REVIVE_QUEUE_ID], pop.revive_lag())
        latency = GaugeMetricFamily("rocketmq_pop_revive_latency_milliseconds", "How far past its revive time the"
                                    " most overdue held checkpoint is (0: revive keeps up).", labels=["queue_id"])
        latency.add_metric([REVIVE_QUEUE_ID], pop.revive_latency_ms())
        return [inflight, checkpoints, lag, latency]

