"""Batch and streaming readers of ``format("pyrmq")``.

What runs where (pyspark 4.3): ``partitions()`` / ``latestOffset()`` run in a planning worker or the streaming
source runner on the driver; ``read()`` runs in executor task workers on an unpickled copy. So everything
``read()`` needs travels in the ``QueuePartition``; no reader attribute set on the driver reaches ``read()``.

Streaming offsets: see ``offsets.py``. Each trigger makes one GetQueueOffsets per queue (in parallel) and one
route read every 15 s; with the default trigger (processingTime=0) an idle query polls continuously, so use
``trigger(processingTime="1 second")`` or more for idle topics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

import connectors.spark.offsets as off
from connectors.spark.broker_client import client_for
from connectors.spark.errors import DataLossError
from connectors.spark.options import ReadSettings, SourceOptions
from connectors.spark.read import read_range
from connectors.spark.schema import COLUMNS, arrow_schema

log = logging.getLogger("pyrmq.spark")


@dataclass(frozen=True)
class QueuePartition(InputPartition):
    """One queue range and the settings to read it; picklable, no clients."""

    range: off.Range
    settings: ReadSettings


def check_schema(schema) -> None:
    names = tuple(schema.fieldNames())
    if names != COLUMNS:
        raise ValueError(
            f"format pyrmq produces the columns {', '.join(COLUMNS)}; a user schema with {', '.join(names)} "
            "cannot be served; drop .schema(...) and select or cast columns afterwards"
        )


def live_offsets(opts: SourceOptions) -> off.Live:
    client = client_for(opts.read.namesrv, opts.read.request_timeout_s, opts.read.tls)
    out: off.Live = {}
    for topic in opts.topics:
        found = client.live_offsets(topic)
        out[topic] = {off.qkey(b, q): mm for (b, q), mm in found.items()}
    return out


def check_data_loss(start: off.Offsets, live: off.Live, fail: bool) -> off.Offsets:
    """Raise DataLossError when a start offset was deleted (fail), else return start moved up to the min."""
    moved = {t: dict(q) for t, q in start.items()}
    for topic, queues in start.items():
        for key, value in queues.items():
            lo = live.get(topic, {}).get(key, (value, value))[0]
            if value < lo:
                if fail:
                    raise DataLossError(f"{topic}@{key}", value, lo)
                log.warning(
                    "%s@%s: offsets [%d, %d) were deleted; skipping them (failOnDataLoss=false)", topic, key, value, lo
                )
                moved[topic][key] = lo
    return off.canonical(moved)


def partitions_between(opts: SourceOptions, start: off.Offsets, end: off.Offsets) -> list[QueuePartition]:
    ranges = off.plan_ranges(start, end, opts.max_messages_per_partition)
    return [QueuePartition(r, opts.read) for r in ranges]


class PyrmqBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, schema) -> None:
        check_schema(schema)
        self.opts = opts
        self.schema = schema

    def partitions(self):
        live = live_offsets(self.opts)
        spec = self.opts.starting_offsets or "earliest"
        start = off.resolve(off.parse_spec(spec, "startingOffsets", self.opts.topics), live)
        end = off.resolve(
            off.parse_spec(self.opts.ending_offsets, "endingOffsets", self.opts.topics, allow_earliest=False), live
        )
        start = check_data_loss(start, live, self.opts.read.fail_on_data_loss)
        for topic, queues in end.items():
            for key, until in queues.items():
                if until < start.get(topic, {}).get(key, 0):
                    raise ValueError(
                        f"endingOffsets {topic}@{key}={until} is before startingOffsets "
                        f"{start[topic][key]}; give an end at or after the start"
                    )
        parts = partitions_between(self.opts, start, end)
        return parts or [QueuePartition(off.Range(self.opts.topics[0], "", 0, 0, 0), self.opts.read)]

    def read(self, partition: QueuePartition):
        if partition.range.until <= partition.range.start:
            return iter(())
        return read_range(partition.range, partition.settings, arrow_schema(self.schema))


class PyrmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions, schema) -> None:
        check_schema(schema)
        self.opts = opts
        self.schema = schema
        self._target: off.Offsets | None = None  # AvailableNow: the offsets recorded at the start
        self._latest: off.Offsets | None = None
        self._live: off.Live | None = None

    # offsets (runner process on the driver) ------------------------------------------------------------
    def initialOffset(self) -> dict:
        spec = self.opts.starting_offsets or "latest"
        return off.resolve(off.parse_spec(spec, "startingOffsets", self.opts.topics), self._refresh())

    def _refresh(self) -> off.Live:
        self._live = live_offsets(self.opts)
        self._latest = off.canonical({t: {k: mm[1] for k, mm in q.items()} for t, q in self._live.items()})
        return self._live

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._refresh()
        self._target = self._latest
        log.info("Trigger.AvailableNow: reading up to %s", self._target)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        live = self._refresh()
        begin, added = off.with_new_queues(off.canonical(start), live)
        if added:
            log.info("new queues start at their min offset: %s", ", ".join(added))
        effective = check_data_loss(begin, live, self.opts.read.fail_on_data_loss)
        fresh = set(added)
        target: off.Offsets = {}
        for topic, queues in effective.items():
            target[topic] = {}
            for key, value in queues.items():
                if f"{topic}@{key}" in fresh:
                    # A new queue enters the offsets at its min with no data this batch, so the next batch's
                    # start (which Spark passes to partitions()) names it.
                    target[topic][key] = value
                    continue
                if key not in live.get(topic, {}):
                    target[topic][key] = begin[topic][key]  # group down or queue removed: no progress
                    continue
                hi = live[topic][key][1]
                if self._target is not None:
                    hi = min(hi, self._target.get(topic, {}).get(key, value))
                target[topic][key] = max(value, hi)
        end = off.cap_by_rows(effective, target, limit.max_rows) if isinstance(limit, ReadMaxRows) else target
        return off.canonical(end)

    def reportLatestOffset(self):
        return self._latest

    def partitions(self, start: dict, end: dict):
        begin = off.canonical(start)
        if not self.opts.read.fail_on_data_loss and self._live is not None:
            begin = check_data_loss(begin, self._live, False)
        return partitions_between(self.opts, begin, off.canonical(end))

    def commit(self, end: dict) -> None:
        if not self.opts.commit_offsets_to_broker:
            return
        client = client_for(self.opts.read.namesrv, self.opts.read.request_timeout_s,
                            self.opts.read.tls)
        for topic, queues in end.items():
            for key, value in queues.items():
                broker, qid = off.parse_qkey(key)
                client.commit_offset(self.opts.read.consumer_group, topic, broker, qid, int(value))

    def stop(self) -> None:
        pass

    # executors -------------------------------------------------------------------------------------------
    def read(self, partition: QueuePartition):
        return read_range(partition.range, partition.settings, arrow_schema(self.schema))
