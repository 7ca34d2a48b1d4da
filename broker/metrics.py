"""BrokerMetrics: every Prometheus series a broker exports (DESIGN.md §8, spec/operator-conventions.md §4.3, §4.5).

Two kinds of series, so the hot path pays (almost) nothing:

- **Counters updated per batch** by explicit calls from the request handlers: ``on_send`` (one call per send
  request, whatever its message count), ``on_pull``, ``on_sync_wait``, ``on_send_back``, ``on_slave_sync``.
  Each is a cached child lookup plus a few locked adds; the message-size histogram takes the batch's sizes in
  one call (see ``common.metrics.BatchHistogram``: exact, O(1) Python work when the batch is uniform).
- **Gauges mirroring state** (commitlog offsets, flush/dispatch backlog, disk use, HA links, consumer lag) are
  computed at SCRAPE time by collectors that call providers set with ``set_providers`` (the families are built
  in ``state_metrics.py`` and ``lag_metrics.py``); nothing is maintained between scrapes. Collection runs on the
  event loop (``common.metrics_server.MetricsServer`` takes a snapshot there and renders the text in its own
  thread), so providers may read loop-owned state directly.

Bounded cardinality: auto-created topics are unbounded (2,000 one-message topics made a 6.4 MB page), so every
family labelled by topic or consumer group keeps at most ``series_limit`` (default ``SERIES_LIMIT``) label sets,
the busiest by recent traffic (consumer lag: the largest lags), and sums the rest under ``topic="_other"`` /
``consumer_group="_other"`` (``common.series_cap.SeriesCap``: counters stay monotonic, totals exact). Each such
family's help says so.

Names follow RocketMQ 5 where they exist (``rocketmq_messages_in_total``, ``rocketmq_throughput_in_total``,
``rocketmq_message_size``, ``rocketmq_consumer_lag_messages``, ``rocketmq_consumer_lag_latency_milliseconds`` —
RocketMQ's OTel exporter appends the unit, so that is the name its dashboards query —
``rocketmq_send_to_dlq_messages_total``, ``rocketmq_storage_*``), and operator-conventions §4.5 for replication,
which RocketMQ lacks. Every series carries ``cluster``, ``node_type="broker"``, ``node_id`` (= brokerName, shared
by a master and its slaves), ``broker_id`` and ``role`` (SYNC_MASTER / ASYNC_MASTER / SLAVE).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.ha.status import HAStatus
from broker.lag_metrics import ConsumerLag, OffsetTableProvider, QueueMaxOffset, QueueStoreTimestamp, is_system_label
from broker.state_metrics import StoreGauges, disk_families, ha_families, store_families
from common.loop_lag import loop_lag_histogram
from common.metrics import (
    BatchHistogram,
    LoopCounter,
    ScrapeCollector,
    const_labels,
    label_value,
)
from common.series_cap import OTHER, CappedGroup, SeriesCap

# RocketMQ 5's rocketmq_message_size buckets: 1K, 4K, 512K, 1M, 2M, 4M (bytes).
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024**2, 2 * 1024**2, 4 * 1024**2)
# SYNC_MASTER ack waits: sub-millisecond on loopback up to the 3 s slaveTimeout (FLUSH_SLAVE_TIMEOUT).
SYNC_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
# Per-topic / per-group label sets kept per family; the rest are summed under "_other". 50 keeps a broker's page
# near 100 KB however many topics it has, and covers the topics a dashboard can show.
SERIES_LIMIT = 50


# Providers: plain callables, called on the event loop at scrape time.
StoreProvider = Callable[[], StoreGauges]
HAProvider = Callable[[], HAStatus]  # HAService.status: the typed record GET_BROKER_HA_STATUS answers too
ReplicaWaiter = Callable[[int], Awaitable[tuple[object, str]]]  # the store's: next_offset -> (PutStatus, remark)

class BrokerMetrics:
    """All broker series, registered in ``registry`` (the process's registry from ``common.metrics.new_registry``).

    Update methods are called once per batch/request, from the event loop. ``set_providers`` may be called at
    any time (later calls replace earlier ones; ``None`` leaves a provider unchanged).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        role: object,
        broker_addr: str = "",
        store_dir: str | Path | None = None,
        clock_s: Callable[[], float] = time.time,
        series_limit: int = SERIES_LIMIT,
    ) -> None:
        self.role = label_value(role)
        self.broker_name = broker_name
        self.cluster = cluster
        self.broker_id = int(broker_id)
        self.broker_addr = broker_addr
        self.store_dir = Path(store_dir) if store_dir else None
        self._clock_s = clock_s
        self.series_limit = series_limit
        per_topic = (f" At most {series_limit} topics (the busiest recently) have series of their own; the others are"
                     f' summed under topic="{OTHER}".')
        per_group = (f" At most {series_limit} topic and group pairs (the busiest recently) have series of their own;"
                     f' the others are summed under topic="{OTHER}",consumer_group="{OTHER}".')
        common = {"cluster": cluster, "node_type": "broker", "node_id": broker_name, "broker_id": broker_id,
                  "role": self.role}
        reg = self.registry = const_labels(registry, common)

        # RocketMQ 5 message series -------------------------------------------------------------------------
        # Hot-path counters are LoopCounters (no lock per inc; see common.metrics), registered below.
        in_labels = ["topic", "message_type", "is_system"]
        out_labels = ["topic", "consumer_group", "is_system"]
        self.messages_in = LoopCounter("rocketmq_messages_in", "Messages stored (produced), per topic." + per_topic,
                                       in_labels)
        self.throughput_in = LoopCounter("rocketmq_throughput_in",
                                         "Message body bytes stored (produced)." + per_topic, in_labels)
        self.message_size = BatchHistogram("rocketmq_message_size",
                                           "Size of stored message bodies in bytes." + per_topic,
                                           MESSAGE_SIZE_BUCKETS, in_labels)
        self.messages_out = LoopCounter("rocketmq_messages_out",
                                        "Messages delivered to consumers by pulls." + per_group, out_labels)
        self.throughput_out = LoopCounter("rocketmq_throughput_out",
                                          "Message bytes delivered to consumers by pulls." + per_group, out_labels)
        self.send_to_dlq = LoopCounter("rocketmq_send_to_dlq_messages",
                                       "Messages moved to a %DLQ% topic." + per_group, out_labels)
        self.send_back = LoopCounter("rocketmq_send_back_messages",
                                     "Messages a consumer sent back for redelivery (retry or DLQ)." + per_group,
                                     ["topic", "consumer_group"])

        # pyrmq: send outcomes and replication waits ---------------------------------------------------------
        self.send_results = LoopCounter("rocketmq_send_results", "Messages answered to producers, by put status.",
                                        ["status"])
        self.send_requests = LoopCounter("rocketmq_send_requests", "Send requests (batches) answered, by put status.",
                                         ["status"])
        self.sync_wait = BatchHistogram("rocketmq_ha_sync_wait_seconds",
                                        "SYNC_MASTER wait for a slave ack of a batch's end offset.", SYNC_WAIT_BUCKETS)
        self.sync_wait.observe(0.0, 0)  # an unlabelled histogram exists (all zero) before the first wait
        self.sync_timeouts = LoopCounter("rocketmq_ha_sync_timeouts", "Batches answered FLUSH_SLAVE_TIMEOUT.")
        self.sync_timeouts.cell()
        self.pulls = LoopCounter("rocketmq_pull_requests", "Pull requests answered with messages or not.", ["found"])
        self.pull_slave_suggestions = LoopCounter("rocketmq_pull_slave_suggestions",
                                                  "Pull responses that advised the consumer to pull from a slave.")
        self.pull_slave_suggestions.cell()
        self.loop_lag = loop_lag_histogram()  # observed by a LoopLagProbe the server runs
        # transactional messages (master only; RocketMQ 5's names): open halves at scrape time, outcomes as counted
        self.half_messages = Gauge("rocketmq_half_messages", "Half (prepared) messages whose transaction is open.",
                                   registry=reg)
        self.commit_messages = LoopCounter("rocketmq_commit_messages", "Transactions committed (message delivered).")
        self.rollback_messages = LoopCounter("rocketmq_rollback_messages", "Transactions rolled back.")
        self.transaction_checks = LoopCounter(
            "rocketmq_transaction_checks",
            "Transaction checks of open halves, by outcome: sent (to a live producer), no_producer, renewed (an older"
            " copy closed), discarded"
            " (transactionCheckMax reached: moved to TRANS_CHECK_MAX_TIME_TOPIC), failed.", ["outcome"])
        self.commit_messages.cell()
        self.rollback_messages.cell()
        for outcome in ("sent", "no_producer", "discarded", "failed"):
            self.transaction_checks.cell(outcome)
        # Topic- and group-labelled families through their caps; a group shares one cap (same topics kept).
        groups = [
            (SeriesCap(series_limit, in_labels, ["topic"]), self.messages_in,
             [self.messages_in, self.throughput_in, self.message_size]),
            (SeriesCap(series_limit, out_labels, ["topic", "consumer_group"]), self.messages_out,
             [self.messages_out, self.throughput_out]),
            (SeriesCap(series_limit, out_labels, ["topic", "consumer_group"]), self.send_to_dlq, [self.send_to_dlq]),
            (SeriesCap(series_limit, ["topic", "consumer_group"], ["topic", "consumer_group"]), self.send_back,
             [self.send_back]),
        ]
        for cap, driver, families in groups:
            reg.register(CappedGroup(cap, driver, families))
        for family in (self.send_results, self.send_requests, self.sync_wait, self.sync_timeouts, self.pulls,
                       self.pull_slave_suggestions, self.loop_lag, self.commit_messages, self.rollback_messages,
                       self.transaction_checks):
            reg.register(family)

        # slave metadata sync (slaves only) ---------------------------------------------------------------------
        self.slave_sync_runs: Counter | None = None
        self.slave_sync_last_success: Gauge | None = None
        if self.role == "SLAVE":
            self.slave_sync_runs = Counter("rocketmq_slave_sync_runs", "Slave metadata sync steps, by outcome.",
                                           ["step", "outcome"], registry=reg)
            self.slave_sync_last_success = Gauge("rocketmq_slave_sync_last_success_timestamp_seconds",
                                                 "Epoch seconds of the last fully successful metadata sync "
                                                 "(0: none yet).", registry=reg)

        self._store: StoreProvider | None = None
        self._ha: HAProvider | None = None
        self._ha_duplicate_claims: Callable[[], dict[int, int]] | None = None  # a master's HACounters.duplicate_claims
        self.lag = ConsumerLag(series_limit, clock_s)
        reg.register(ScrapeCollector("broker-state", self._collect_state))
        reg.register(ScrapeCollector("consumer-lag", self.lag.collect))

        self._in_cells: dict[tuple[str, str], tuple] = {}
        self._out_cells: dict[tuple[str, str], tuple] = {}
        self._status_cells: dict[str, tuple] = {}
        for status in ("PUT_OK", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"):
            self._status(status)  # so rate()/status panels have series before the first failure
        self._ok_cells = self._status("PUT_OK")
        self._pull_found, self._pull_empty = self.pulls.cell("true"), self.pulls.cell("false")

    # providers ----------------------------------------------------------------------------------------------
    def set_providers(
        self,
        *,
        store: StoreProvider | None = None,
        ha: HAProvider | None = None,
        consumer_offsets: OffsetTableProvider | None = None,
        queue_max_offset: QueueMaxOffset | None = None,
        queue_store_timestamp: QueueStoreTimestamp | None = None,
    ) -> None:
        self._store = store or self._store
        self._ha = ha or self._ha
        self.lag.set_providers(consumer_offsets=consumer_offsets, queue_max_offset=queue_max_offset,
                               queue_store_timestamp=queue_store_timestamp)

    def attach(self, *, store=None, ha=None, offsets=None) -> None:
        """Set the providers from the real objects: a started ``MessageStore``, the ``HAService`` and the
        ``ConsumerOffsetManager``. Each is read only at scrape time."""
        if store is not None:
            self.set_providers(
                store=lambda: StoreGauges(store.max_phy_offset, store.min_phy_offset, store.flushed_phy_offset,
                                          store.dispatched_phy_offset, *store.consume_queue_files()),
                queue_max_offset=store.max_offset_in_queue,
                queue_store_timestamp=store.store_timestamp_at,
            )
        if ha is not None:
            self.set_providers(ha=ha.status)
            counters = ha.counters
            self._ha_duplicate_claims = lambda: counters.duplicate_claims
        if offsets is not None:
            self.set_providers(consumer_offsets=lambda: offsets.table)

    # per-batch updates ---------------------------------------------------------------------------------------
    def on_send(
        self,
        topic: str,
        msg_count: int,
        total_bytes: int,
        status: object,
        *,
        sizes: Sequence[int] | None = None,
        message_type: str = "normal",
    ) -> None:
        """One send request answered. ``status`` is a PutStatus (or its name, or another answer such as
        ``SERVICE_NOT_AVAILABLE``); messages count as produced when the status means stored. ``sizes`` are the
        body sizes of the batch (``[len(m.body) for m in request.messages]``); for a one-message batch it may be
        omitted. ``total_bytes`` is their sum."""
        name = label_value(status)
        results, requests = self._status(name)
        results[0] += msg_count
        requests[0] += 1
        if getattr(status, "stored", name in _STORED_NAMES):
            key = (topic, message_type)
            cells = self._in_cells.get(key)
            if cells is None:
                labels = (topic, message_type, label_value(is_system_label(topic)))
                cells = self._in_cells[key] = (self.messages_in.cell(*labels), self.throughput_in.cell(*labels), labels)
            cells[0][0] += msg_count
            cells[1][0] += total_bytes
            if sizes is not None:
                self.message_size.observe_batch(sizes, cells[2], total_bytes)
            elif msg_count == 1:
                self.message_size.observe(total_bytes, 1, cells[2])
            elif msg_count > 1:
                raise ValueError("on_send: pass sizes= for a batch of more than one message")

    def on_single_stored(self, topic: str, size: int) -> None:
        """``on_send(topic, 1, size, PutStatus.PUT_OK)``, the answer of nearly every single-message send, without
        the status's name lookup (one call per request of RocketMQ's clients)."""
        cells = self._in_cells.get((topic, "normal"))
        if cells is None:
            self.on_send(topic, 1, size, "PUT_OK")
            return
        ok = self._ok_cells
        ok[0][0] += 1
        ok[1][0] += 1
        cells[0][0] += 1
        cells[1][0] += size
        self.message_size.observe(size, 1, cells[2])

    def on_pull(self, topic: str, group: str, msg_count: int, total_bytes: int, suggested_slave: bool = False) -> None:
        """One pull request answered (``msg_count`` 0 when nothing was found)."""
        if msg_count > 0:
            key = (topic, group)
            cells = self._out_cells.get(key)
            if cells is None:
                labels = (topic, group, label_value(is_system_label(topic)))
                cells = self._out_cells[key] = (self.messages_out.cell(*labels), self.throughput_out.cell(*labels))
            cells[0][0] += msg_count
            cells[1][0] += total_bytes
            self._pull_found[0] += 1
        else:
            self._pull_empty[0] += 1
        if suggested_slave:
            self.pull_slave_suggestions.inc()

    def pulled_messages(self, topic: str, group: str) -> int:
        """Messages pulled by ``group`` from ``topic`` since start (GET_CONSUME_STATS derives consumeTps from it)."""
        cells = self._out_cells.get((topic, group))
        return int(cells[0][0]) if cells is not None else 0

    def on_sync_wait(self, seconds: float, status: object) -> None:
        """A SYNC_MASTER batch finished waiting for its slave ack (PUT_OK) or gave up (FLUSH_SLAVE_TIMEOUT)."""
        self.sync_wait.observe(seconds)
        if label_value(status) == "FLUSH_SLAVE_TIMEOUT":
            self.sync_timeouts.inc()

    def on_send_back(self, topic: str, group: str, msg_count: int = 1, *, to_dlq: bool = False) -> None:
        """A consumer returned messages of ``topic`` (the original topic); ``to_dlq`` when they went to %DLQ%."""
        self.send_back.inc(msg_count, topic, group)
        if to_dlq:
            self.send_to_dlq.inc(msg_count, topic, group, label_value(is_system_label(topic)))

    def attach_transactions(self, open_count: Callable[[], int]) -> None:
        """``rocketmq_half_messages`` reads ``open_count`` (the transaction service's ledger) at scrape time."""
        self.half_messages.set_function(open_count)

    def on_transaction_end(self, committed: bool) -> None:
        (self.commit_messages if committed else self.rollback_messages).inc()

    def on_transaction_check(self, outcome: str) -> None:
        self.transaction_checks.inc(1, outcome)

    def on_slave_sync(self, step: str, ok: bool) -> None:
        """One metadata-sync step on a slave (``topic_config``, ``consumer_offsets``, ``delay_offsets``,
        ``subscription_groups``, or ``all`` for a whole round; a successful ``all`` sets the last-success time).
        A no-op on a master."""
        if self.slave_sync_runs is None:
            return  # a master has no slave sync
        self.slave_sync_runs.labels(step, "success" if ok else "failure").inc()
        if ok and step == "all":
            self.slave_sync_last_success.set(self._clock_s())

    def timed_replica_waiter(self, waiter: ReplicaWaiter) -> ReplicaWaiter:
        """Wrap the store's replica waiter (``GroupTransfer.wait``) so each SYNC_MASTER batch observes its wait
        once; ``HAService.start`` installs it, wrapped by this (the broker passes it as ``wrap_waiter``). An immediate
        SLAVE_NOT_AVAILABLE is not a wait and is only counted by ``on_send``."""
        clock = time.perf_counter

        async def timed(next_offset: int, deadline: float | None = None):
            started = clock()
            status, remark = await (waiter(next_offset) if deadline is None else waiter(next_offset, deadline))
            if label_value(status) != "SLAVE_NOT_AVAILABLE":
                self.on_sync_wait(clock() - started, status)
            return status, remark

        return timed

    def _status(self, name: str) -> tuple:
        cells = self._status_cells.get(name)
        if cells is None:
            cells = self._status_cells[name] = (self.send_results.cell(name), self.send_requests.cell(name))
        return cells

    # scrape-time collectors ----------------------------------------------------------------------------------
    def _collect_state(self) -> Iterable[Metric]:
        out: list[Metric] = []
        info = GaugeMetricFamily("rocketmq_broker_info", "Always 1; identifies the broker.", labels=["broker_addr"])
        info.add_metric([self.broker_addr], 1)
        out.append(info)
        if self._store is not None:
            out.extend(store_families(self._store()))
        if self.store_dir is not None:
            out.extend(disk_families(self.store_dir))
        if self._ha is not None:
            out.extend(ha_families(self._ha(), self.broker_name, self._clock_s()))
        if self._ha_duplicate_claims is not None and self.role != "SLAVE":
            claims = CounterMetricFamily("rocketmq_ha_duplicate_slave_claims",
                                         "Peers that proved the HA secret and claimed the brokerId of a live slave "
                                         "link; each was refused (an alarm: two slaves share a brokerId, or the "
                                         "secret leaked).", labels=["slave_broker_id"])
            for broker_id, count in sorted(self._ha_duplicate_claims().items()):
                claims.add_metric([str(broker_id)], count)
            out.append(claims)
        return out


_STORED_NAMES = frozenset({"PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"})
