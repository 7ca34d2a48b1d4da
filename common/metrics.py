"""Metric collectors shared by every server: constant labels, loop-owned counters, batch histograms, scrape-time
providers, and the deferred-collection protocol the ``/metrics`` endpoint (``common.metrics_server``) relies on.

Each process owns ONE ``CollectorRegistry`` (``new_registry()``), never prometheus_client's global default, so
several servers started in one test process do not collide.

Deferred collection: during the metrics server's snapshot (``deferring()``), collectors that can split their work
(``ConstLabels``, ``common.series_cap.CappedGroup``) copy their numbers on the loop and return a ``Deferred``
whose ``finish`` runs in the server thread (ranking, folding, adding constant labels). Outside a snapshot,
``collect()`` returns ordinary families, so ``generate_latest(registry)`` works as anywhere.

``ConstLabels`` wraps a collector (usually a private registry) and adds the process's common labels
(``cluster``, ``node_type``, ``node_id``, ...) to every sample at scrape time (in a snapshot it hands each family
and the labels to the server's renderer, ``common.exposition.Labelled``, instead of copying every sample), so
hot-path ``labels()`` calls carry only the labels that vary (``topic``, ``consumer_group``). It also drops
prometheus_client's ``*_created`` samples, which would double the series count for nothing.

``LoopCounter`` is a counter family for the hot path: plain floats in per-label-set cells, no lock, because every
update and every scrape runs on the one event loop thread (prometheus_client's ``Counter`` takes a lock per
``inc``, about a microsecond each). ``BatchHistogram`` is a histogram that takes a whole batch of observations
in one call: messages of a send batch usually fall into the same bucket, so the common case is O(1) Python work
plus C-speed ``min``/``max``/``sum`` over the sizes, and the result is exact (not an average times a count).

Not thread-safe beyond prometheus_client's own locks: update and scrape from the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from common.exposition import Labelled

log = logging.getLogger(__name__)


class Deferred:
    """Metric families to finish off the loop: ``finish()`` (called in the metrics server's thread, never
    concurrently with another scrape) returns families or further ``Deferred``s. Only seen while ``deferring()``."""

    __slots__ = ("finish",)

    def __init__(self, finish: Callable[[], list]) -> None:
        self.finish = finish


_collection = threading.local()


@contextlib.contextmanager
def deferring() -> Iterator[None]:
    """Mark the current thread's collection as a snapshot whose families may be ``Deferred``."""
    _collection.deferring = True
    try:
        yield
    finally:
        _collection.deferring = False


def deferring_now() -> bool:
    return getattr(_collection, "deferring", False)


def finish_all(items: Iterable[object], pause: Callable[[], None] | None = None) -> list[Metric]:
    """Resolve every ``Deferred`` in ``items`` (recursively) into its families; ``pause()``, if given, runs after
    each (the server thread passes ``time.sleep(0)`` to hand the GIL to the event loop between them)."""
    out: list[Metric] = []
    for item in items:
        if isinstance(item, Deferred):
            out.extend(finish_all(item.finish(), pause))
            if pause is not None:
                pause()
        else:
            out.append(item)
    return out


def new_registry(*, process_metrics: bool = True) -> CollectorRegistry:
    """A fresh per-process registry, with the standard ``process_*`` and ``python_info`` series if asked."""
    registry = CollectorRegistry(auto_describe=True)
    if process_metrics:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    return registry


def label_value(value: object) -> str:
    """Enum members by value, booleans as RocketMQ's ``true``/``false``, everything else as ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(getattr(value, "value", value))


class ConstLabels(Collector):
    """Add ``labels`` to every sample of ``inner``'s metrics at collect time; drop ``*_created`` samples.

    A sample's own label wins over a constant of the same name (so a family may override ``role``, say).
    """

    def __init__(self, inner: Collector, labels: Mapping[str, object]) -> None:
        self.inner = inner
        self.labels = {k: label_value(v) for k, v in labels.items()}

    def collect(self) -> Iterator[Metric]:
        if deferring_now():  # copy on the loop; the server's renderer merges the labels into each series' text
            collected = list(self.inner.collect())
            yield Deferred(lambda: [Labelled(m, self.labels) for m in map(self._without_created, finish_all(collected))
                                    if m is not None])
            return
        for metric in self.inner.collect():
            labelled = self._labelled(metric)
            if labelled is not None:
                yield labelled

    @staticmethod
    def _without_created(metric: Metric) -> Metric | None:
        samples = [s for s in metric.samples if not s.name.endswith("_created")]
        if not samples and metric.samples:
            return None
        metric.samples = samples
        return metric

    def _labelled(self, metric: Metric) -> Metric | None:
        const = self.labels
        samples = [s._replace(labels={**const, **s.labels}) for s in metric.samples if not s.name.endswith("_created")]
        if not samples and metric.samples:
            return None
        metric.samples = samples
        return metric

    def describe(self) -> Iterator[Metric]:
        # Names only, so registering two ConstLabels over different inners still detects duplicate names.
        describe = getattr(self.inner, "describe", None)
        yield from (describe() if describe is not None else self.inner.collect())


def const_labels(registry: CollectorRegistry, labels: Mapping[str, object]) -> CollectorRegistry:
    """Tiny helper: a private registry whose metrics appear in ``registry`` with ``labels`` added.

    Define metrics against the returned registry with only their varying label names::

        inner = const_labels(process_registry, {"cluster": "c1", "node_type": "broker"})
        sent = Counter("rocketmq_messages_in", "...", ["topic"], registry=inner)
    """
    inner = CollectorRegistry(auto_describe=True)
    registry.register(ConstLabels(inner, labels))
    return inner


class LoopCounter(Collector):
    """A counter family updated from one thread (the event loop): ``cell(*labelvalues)`` returns a one-element
    list to keep and bump (``cell[0] += n``), ``inc`` looks it up each time. Exposed as ``<name>_total``."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name.removesuffix("_total")
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._cells: dict[tuple[str, ...], list[float]] = {}

    def cell(self, *labelvalues: str) -> list[float]:
        cell = self._cells.get(labelvalues)
        if cell is None:
            if len(labelvalues) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labelvalues}")
            cell = self._cells[labelvalues] = [0]
        return cell

    def inc(self, amount: float = 1, *labelvalues: str) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: counters only go up, got {amount}")
        self.cell(*labelvalues)[0] += amount

    def value(self, *labelvalues: str) -> float:
        cell = self._cells.get(labelvalues)
        return cell[0] if cell else 0

    def rows(self) -> Mapping[tuple[str, ...], list[float]]:
        """Label values -> ``[value]`` (the live cells: read them on the loop)."""
        return self._cells

    @staticmethod
    def weight(row: Sequence[float]) -> float:
        return row[0]

    def family(self, rows: Iterable[tuple[tuple[str, ...], Sequence[float]]]) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labelvalues, row in rows:
            family.add_metric(list(labelvalues), row[0])
        return family

    def collect(self) -> Iterator[Metric]:
        yield self.family(list(self._cells.items()))

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)


class BatchHistogram(Collector):
    """A cumulative histogram fed a batch at a time, exposed with prometheus_client's histogram layout.

    ``buckets`` are upper bounds (``+Inf`` is added). ``observe_batch(values)`` is exact: when the batch's
    minimum and maximum share a bucket (the usual case: a producer sends similar messages), the batch costs
    ``min``, ``max`` and ``sum`` at C speed plus one bucket update; otherwise each value is bisected.
    Register it in a registry (``registry.register(h)``) like any collector.
    """

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float], labelnames: Sequence[str] = ()
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != float("inf"):
            bounds.append(float("inf"))
        self.name = name
        self.documentation = documentation
        self.bounds = bounds
        self.labelnames = tuple(labelnames)
        # label values -> [per-bucket (non-cumulative) counts..., sum]
        self._series: dict[tuple[str, ...], list[float]] = {}

    def _row(self, labelvalues: tuple[str, ...]) -> list[float]:
        row = self._series.get(labelvalues)
        if row is None:
            if len(labelvalues) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labelvalues}")
            row = self._series[labelvalues] = [0] * len(self.bounds) + [0.0]
        return row

    def observe(self, value: float, count: int = 1, labelvalues: tuple[str, ...] = ()) -> None:
        """``count`` observations of the same ``value``."""
        row = self._row(labelvalues)
        row[bisect_left(self.bounds, value)] += count
        row[-1] += value * count

    def observe_batch(
        self, values: Sequence[float], labelvalues: tuple[str, ...] = (), total: float | None = None
    ) -> None:
        """One observation per element of ``values``; ``total`` may pass ``sum(values)`` if already known."""
        if not values:
            return
        row = self._row(labelvalues)
        bounds = self.bounds
        lo = bisect_left(bounds, min(values))
        if lo == bisect_left(bounds, max(values)):
            row[lo] += len(values)
        else:
            for v in values:
                row[bisect_left(bounds, v)] += 1
        row[-1] += sum(values) if total is None else total

    def rows(self) -> Mapping[tuple[str, ...], list[float]]:
        """Label values -> per-bucket (non-cumulative) counts followed by the sum (live: read them on the loop)."""
        return self._series

    @staticmethod
    def weight(row: Sequence[float]) -> float:
        return sum(row[:-1])  # observations

    def family(self, rows: Iterable[tuple[tuple[str, ...], Sequence[float]]]) -> Metric:
        """``HistogramMetricFamily.add_metric``'s samples (buckets, ``_count``, ``_sum``; the bounds are never
        negative), built directly: its per-bucket checks and copies were most of a scrape's finishing work."""
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = ["+Inf" if b == float("inf") else repr(b) for b in self.bounds]
        bucket_name, count_name, sum_name = self.name + "_bucket", self.name + "_count", self.name + "_sum"
        names = self.labelnames
        append = family.samples.append
        for labelvalues, row in rows:
            labels = dict(zip(names, labelvalues))
            acc = 0
            for edge, count in zip(edges, row[:-1]):
                acc += count
                append(Sample(bucket_name, {**labels, "le": edge}, acc))
            append(Sample(count_name, labels, acc))
            append(Sample(sum_name, dict(labels), row[-1]))
        return family

    def collect(self) -> Iterator[Metric]:
        yield self.family(list(self._series.items()))

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)


class ScrapeCollector(Collector):
    """A collector built from a function that yields metric families at scrape time.

    An exception in ``fn`` is logged (once per distinct message) and the scrape goes on without those families,
    so one broken provider never blanks a whole ``/metrics`` page.
    """

    def __init__(self, name: str, fn: Callable[[], Iterable[Metric]]) -> None:
        self.name = name
        self.fn = fn
        self._last_error = ""

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self.fn())
        except Exception as exc:  # noqa: BLE001 - a provider failed: keep the rest of the page
            text = f"{exc.__class__.__name__}: {exc}"
            if text != self._last_error:
                log.warning("metrics collector %s failed: %s (its series are missing from this scrape)", self.name,
                            text)
                self._last_error = text
            return
        self._last_error = ""
        yield from families

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names are dynamic; skip the duplicate check


HeldBytesSnapshot = Callable[[], "tuple[int, int, int, Mapping[str, int]]"]


def held_bytes_collector(snapshot: HeldBytesSnapshot) -> ScrapeCollector:
    """The remoting connections' memory bound as series, from ``snapshot() -> (held, cap, connections, closes by
    reason)`` (``remoting.held_bytes.HeldBytes.snapshot``), read at scrape time: ``rocketmq_remoting_held_bytes``,
    ``rocketmq_remoting_held_bytes_limit``, ``rocketmq_remoting_connections`` and
    ``rocketmq_remoting_connections_closed_total{reason}``. Register it where the process's constant labels apply."""

    def families() -> list[Metric]:
        held, cap, connections, closes = snapshot()
        closed = CounterMetricFamily(
            "rocketmq_remoting_connections_closed",
            "Remoting connections this process closed to bound its memory, by reason: frame_refused (a large frame "
            "while the connections held the cap), shed (the largest holders past the cap), frame_timeout (a frame "
            "not whole in time), unread_answers (the peer did not read), malformed (not a remoting frame); on TLS ports (remoting, and a "
            "broker's permissive v2 front) tls_handshake_timeout, tls_handshake_failed, plaintext_on_tls_port, "
            "tls_pending_full.",
            labels=["reason"],
        )
        for reason, count in closes.items():
            closed.add_metric([reason], count)
        return [
            GaugeMetricFamily("rocketmq_remoting_held_bytes",
                              "Bytes the remoting connections hold in partial frames (at their announced size), "
                              "requests being served and answers the peers have not read.", held),
            GaugeMetricFamily("rocketmq_remoting_held_bytes_limit",
                              "The cap on rocketmq_remoting_held_bytes (serverMaxHeldBytes).", cap),
            GaugeMetricFamily("rocketmq_remoting_connections", "Open remoting connections (listen and fast ports).",
                              connections),
            closed,
        ]

    return ScrapeCollector("remoting-held-bytes", families)
