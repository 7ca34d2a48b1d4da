"""Metrics plumbing shared by every server: a stoppable ``/metrics`` endpoint, constant labels, batch histograms.

Each process owns ONE ``CollectorRegistry`` (``new_registry()``), never prometheus_client's global default, so
several servers started in one test process do not collide. ``MetricsServer`` serves that registry over HTTP
from the process's own event loop (asyncio streams, no extra thread): scrape-time collectors therefore read
loop-owned state (route table, HA connections, store offsets) without locks or torn reads, and stopping the
server is an ordinary ``await stop()``. A scrape costs the loop one ``generate_latest`` (a few ms at most for
pyrmq's series counts, every scrape interval).

``ConstLabels`` wraps a collector (usually a private registry) and adds the process's common labels
(``cluster``, ``node_type``, ``node_id``, ...) to every sample at scrape time, so hot-path ``labels()`` calls
carry only the labels that vary (``topic``, ``consumer_group``). It also drops prometheus_client's ``*_created``
samples, which would double the series count for nothing.

``LoopCounter`` is a counter family for the hot path: plain floats in per-label-set cells, no lock, because every
update and every scrape runs on the one event loop thread (prometheus_client's ``Counter`` takes a lock per
``inc``, about a microsecond each). ``BatchHistogram`` is a histogram that takes a whole batch of observations in one call: messages of a send
batch usually fall into the same bucket, so the common case is O(1) Python work plus C-speed ``min``/``max``/
``sum`` over the sizes, and the result is exact (not an average times a count).

Not thread-safe beyond prometheus_client's own locks: update and scrape from the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from common.service import Service

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 16 * 1024


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
        const = self.labels
        for metric in self.inner.collect():
            samples = [
                s._replace(labels={**const, **s.labels}) for s in metric.samples if not s.name.endswith("_created")
            ]
            if not samples and metric.samples:
                continue
            metric.samples = samples
            yield metric

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

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labelvalues, cell in list(self._cells.items()):
            family.add_metric(list(labelvalues), cell[0])
        yield family

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

    def observe_batch(self, values: Sequence[float], labelvalues: tuple[str, ...] = (), total: float | None = None) -> None:
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

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = ["+Inf" if b == float("inf") else repr(b) for b in self.bounds]
        for labelvalues, row in list(self._series.items()):
            cumulative, acc = [], 0
            for edge, count in zip(edges, row[:-1]):
                acc += count
                cumulative.append((edge, acc))
            family.add_metric(list(labelvalues), cumulative, row[-1])
        yield family

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
        except Exception as exc:  # a provider failed: keep the rest of the page
            text = f"{exc.__class__.__name__}: {exc}"
            if text != self._last_error:
                log.warning("metrics collector %s failed: %s (its series are missing from this scrape)", self.name, text)
                self._last_error = text
            return
        self._last_error = ""
        yield from families

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names are dynamic; skip the duplicate check


class MetricsServer(Service):
    """Serve ``registry`` at ``http://host:port/metrics`` from the running event loop.

    ``host`` empty means every interface (``0.0.0.0``). ``port`` 0 picks a free port; ``bound_port`` tells
    which. ``/`` answers a one-line pointer, anything else 404; only GET and HEAD are served. Each connection
    answers one request and closes (HTTP/1.1 with ``Connection: close``), which Prometheus handles fine.
    """

    def __init__(self, registry: Collector, *, host: str = "", port: int = 5557, path: str = "/metrics") -> None:
        super().__init__("MetricsServer")
        self.registry = registry
        self.host = host or "0.0.0.0"
        self.port = port
        self.path = path
        self.bound_port = 0
        self.scrapes = 0
        self._server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.bound_port}{self.path}"

    async def on_start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
        except OSError as exc:
            raise OSError(
                f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}; "
                "set metricsPromExporterPort to a free port (0 picks one) or metricsExporterType=DISABLE"
            ) from exc
        self.bound_port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d%s", self.host, self.bound_port, self.path)

    async def on_stop(self) -> None:
        if self._server is not None:
            self._server.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout=2.0)
            except TimeoutError:
                log.warning("metrics server: connections still open after 2 s; leaving them to close")
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        try:
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        except ValueError:
            await self._respond(writer, 400, b"bad request line\n", "text/plain")
            return
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            await self._respond(writer, 405, b"only GET and HEAD\n", "text/plain")
            return
        if path == self.path:
            try:
                body = generate_latest(self.registry)
            except Exception as exc:  # a collector bug must not kill the connection handler silently
                log.exception("metrics scrape failed")
                await self._respond(writer, 500, f"scrape failed: {exc!r}\n".encode(), "text/plain")
                return
            self.scrapes += 1
            await self._respond(writer, 200, body, CONTENT_TYPE_PLAIN_0_0_4, head_only=method == "HEAD")
        elif path == "/":
            await self._respond(writer, 200, f"pyrmq metrics: {self.path}\n".encode(), "text/plain")
        else:
            await self._respond(writer, 404, f"not found; metrics are at {self.path}\n".encode(), "text/plain")

    @staticmethod
    async def _respond(
        writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str, *, head_only: bool = False
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Server Error"}
        header = (
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode("latin-1")
        try:
            writer.write(header if head_only else header + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
