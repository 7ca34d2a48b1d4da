"""Broker gauges built at scrape time from state records: commitlog offsets, disk use, HA links.

Why a module of its own: ``metrics.py`` holds the counters the request handlers bump on the hot path; these
families are the other kind, rebuilt from scratch at every scrape out of plain records (``StoreGauges``, the
typed ``HAStatus`` of ``broker/ha/status.py``). They are functions of their inputs (plus one ``statvfs`` for the
disk), so what a given state exports can be read and checked without a broker. Names and units: see the
``metrics.py`` docstring.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.ha.status import HAStatus


@dataclass(frozen=True, slots=True)
class StoreGauges:
    """What the store reports at scrape time. ``None`` fields are not exported."""

    max_offset: int  # commitlog max physical offset (bytes)
    min_offset: int  # commitlog min physical offset (bytes)
    flushed_offset: int | None = None  # flushed-to-disk offset: flush_behind = max - flushed
    dispatched_offset: int | None = None  # dispatcher position: dispatch_behind = max - dispatched
    cq_files_open: int | None = None  # consume-queue files open now
    cq_files_limit: int | None = None  # ... kept open at most (maxOpenConsumeQueueFiles or its auto value)
    cq_files_parked: int | None = None  # ... closed to stay under the limit, since start (a steady rate: raise it)


def store_families(s: StoreGauges) -> Iterator[Metric]:
    """Commitlog offsets and the flush / dispatch backlog (``None`` fields are left out)."""
    yield GaugeMetricFamily("rocketmq_commitlog_max_offset_bytes", "Commitlog max physical offset.", s.max_offset)
    yield GaugeMetricFamily("rocketmq_commitlog_min_offset_bytes", "Commitlog min physical offset.", s.min_offset)
    storage = {"storage_type": "local", "storage_medium": "disk"}
    if s.flushed_offset is not None:
        g = GaugeMetricFamily("rocketmq_storage_flush_behind_bytes", "Commitlog bytes written but not yet flushed.",
                              labels=list(storage))
        g.add_metric(list(storage.values()), max(0, s.max_offset - s.flushed_offset))
        yield g
    if s.dispatched_offset is not None:
        g = GaugeMetricFamily("rocketmq_storage_dispatch_behind_bytes",
                              "Commitlog bytes not yet dispatched to consume queues.", labels=list(storage))
        g.add_metric(list(storage.values()), max(0, s.max_offset - s.dispatched_offset))
        yield g
    if s.cq_files_open is not None:
        yield GaugeMetricFamily("rocketmq_consume_queue_files_open", "Consume-queue files open now.", s.cq_files_open)
    if s.cq_files_limit is not None:
        yield GaugeMetricFamily("rocketmq_consume_queue_files_limit",
                                "Consume-queue files kept open at most (maxOpenConsumeQueueFiles).", s.cq_files_limit)
    if s.cq_files_parked is not None:
        yield CounterMetricFamily("rocketmq_consume_queue_files_parked",
                                  "Consume-queue files closed to stay under the limit; a steady rate means active "
                                  "queues are reopened on every access: raise maxOpenConsumeQueueFiles.",
                                  s.cq_files_parked)

def disk_families(store_dir: Path) -> Iterator[Metric]:
    """Use and size of the filesystem holding ``store_dir`` (or its nearest existing parent)."""
    path = store_dir
    while path is not None and not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    used = total - st.f_bfree * st.f_frsize
    labels = ["storage_type", "storage_medium"]
    size = GaugeMetricFamily("rocketmq_storage_size", "Bytes used on the store's filesystem (RocketMQ 5).",
                             labels=labels)
    size.add_metric(["local", "disk"], used)
    yield size
    cap = GaugeMetricFamily("rocketmq_storage_capacity_bytes", "Size of the store's filesystem.", labels=labels)
    cap.add_metric(["local", "disk"], total)
    yield cap

def ha_families(ha: HAStatus, broker_name: str, now_s: float) -> Iterator[Metric]:
    """The typed status as ``broker/ha/status.py`` defines it: epoch ms timestamps, states, a master's
    ``connections_accepted`` and a slave's ``reconnects``. ``now_s`` (epoch seconds) dates the last read's age."""
    if ha.client is None:
        yield GaugeMetricFamily("rocketmq_ha_connections", "Slaves connected over HA.",
                                sum(1 for s in ha.slaves if s.connected))
        yield GaugeMetricFamily("rocketmq_ha_in_sync_slaves", "Connected slaves that are in sync (state OK).",
                                ha.in_sync_slave_nums)
        per_slave = ["slave_addr", "slave_broker_id"]
        ack = GaugeMetricFamily("rocketmq_ha_slave_ack_offset_bytes", "Offset the slave acked.", labels=per_slave)
        behind = GaugeMetricFamily("rocketmq_ha_slave_fall_behind_bytes",
                                   "Master max offset minus the slave's ack (haStatus #Diff); a disconnected "
                                   "slave's keeps growing.", labels=per_slave)
        sent = CounterMetricFamily("rocketmq_ha_transfer_bytes", "Commitlog bytes sent to the slave.",
                                   labels=per_slave)
        diff = GaugeMetricFamily("rocketmq_broker_commitlog_diff",
                                 "rocketmq-exporter alias of the fall-behind bytes.", labels=["brokerIP", "broker"])
        for s in ha.slaves:
            values = [s.addr, str(s.broker_id)]
            ack.add_metric(values, max(0, s.ack_offset))
            behind.add_metric(values, s.diff)
            sent.add_metric(values, s.transferred_bytes)
            diff.add_metric([s.addr, broker_name], s.diff)
        yield from (ack, behind, sent, diff)
        reconnects = ha.connections_accepted
    else:
        client = ha.client
        yield GaugeMetricFamily("rocketmq_ha_connected", "1 while connected to the master over HA.",
                                1 if client.connected else 0)
        read_s = client.last_read_timestamp / 1000.0
        yield GaugeMetricFamily("rocketmq_ha_master_last_read_timestamp_seconds",
                                "Epoch seconds of the last frame read from the master.", read_s)
        age = max(0.0, now_s - read_s) if read_s > 0 else -1
        yield GaugeMetricFamily("rocketmq_ha_master_last_read_age_seconds",
                                "Seconds since the last frame from the master (-1: never).", age)
        yield CounterMetricFamily("rocketmq_ha_replicated_bytes", "Commitlog bytes replicated from the master.",
                                  client.replicated_bytes)
        reconnects = ha.reconnects
    yield CounterMetricFamily("rocketmq_ha_reconnects",
                              "HA (re)connections: to the master on a slave, accepted on a master.", reconnects)
