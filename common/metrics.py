"""Metrics plumbing shared by every server: a stoppable ``/metrics`` endpoint, constant labels, batch histograms,
and a bound on per-topic series.

Each process owns ONE ``CollectorRegistry`` (``new_registry()``), never prometheus_client's global default, so
several servers started in one test process do not collide. ``MetricsServer`` answers HTTP in its own thread and
never renders on the event loop: for each scrape it asks the loop for a snapshot (``registry.collect()``, which
reads loop-owned state such as the route table, HA connections and store offsets without locks or torn reads,
and copies numbers into fresh metric families), then formats the text in its thread, where the GIL's switch
interval lets the loop run every few milliseconds. Before, a broker with 2,000 topics spent 0.5 to 2.5 s of loop
time per scrape formatting 6 MB of text; ``bench/metrics_bench.py`` measures both halves.

Deferred collection: during the server's snapshot (``deferring()``), collectors that can split their work
(``ConstLabels``, ``CappedGroup``) copy their numbers on the loop and return a ``Deferred`` whose ``finish`` runs
in the server thread (ranking, folding, adding constant labels). Outside a snapshot, ``collect()`` returns ordinary
families, so ``generate_latest(registry)`` works as anywhere.

``SeriesCap`` keeps families labelled by topic or consumer group to the busiest ``limit`` label sets; the others
are summed under the label value ``_other`` (``OTHER``), counters staying monotonic (see its docstring).

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
import concurrent.futures
import contextlib
import http.server
import logging
import socket
import socketserver
import threading
import time
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
SNAPSHOT_TIMEOUT_S = 10.0  # a loop that cannot take a snapshot in this long answers 503
MAX_CONCURRENT_SCRAPES = 4  # further connections are closed at once: a scrape flood cannot pile up threads
OTHER = "_other"  # the label value that sums the series a SeriesCap does not keep


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


def finish_all(items: Iterable[object]) -> list[Metric]:
    """Resolve every ``Deferred`` in ``items`` (recursively) into its families."""
    out: list[Metric] = []
    for item in items:
        if isinstance(item, Deferred):
            out.extend(finish_all(item.finish()))
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
        if deferring_now():  # copy on the loop; add the labels (a new sample each) in the server thread
            collected = list(self.inner.collect())
            yield Deferred(lambda: [m for m in map(self._labelled, finish_all(collected)) if m is not None])
            return
        for metric in self.inner.collect():
            labelled = self._labelled(metric)
            if labelled is not None:
                yield labelled

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

    def rows(self) -> Mapping[tuple[str, ...], list[float]]:
        """Label values -> per-bucket (non-cumulative) counts followed by the sum (live: read them on the loop)."""
        return self._series

    @staticmethod
    def weight(row: Sequence[float]) -> float:
        return sum(row[:-1])  # observations

    def family(self, rows: Iterable[tuple[tuple[str, ...], Sequence[float]]]) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = ["+Inf" if b == float("inf") else repr(b) for b in self.bounds]
        for labelvalues, row in rows:
            cumulative, acc = [], 0
            for edge, count in zip(edges, row[:-1]):
                acc += count
                cumulative.append((edge, acc))
            family.add_metric(list(labelvalues), cumulative, row[-1])
        return family

    def collect(self) -> Iterator[Metric]:
        yield self.family(list(self._series.items()))

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)


class SeriesCap:
    """At most ``limit`` label sets of a group of families get series of their own; the rest are summed under
    ``OTHER`` in the ``capped`` labels (``topic``, ``consumer_group``), the other labels kept as they are.

    Which label sets: the busiest, by the growth of a driver family's value between scrapes (``select``). A label
    set is admitted while there is room; when full, a set that grew more than ``ratio`` times as much as the
    slowest kept one replaces it (an idle kept set is replaced by any busy one). So the kept series follow the
    traffic, with hysteresis against churn.

    Counters stay monotonic, in every series and in ``OTHER``: a label set admitted after it was counted under
    ``OTHER`` starts its own series at 0 (its earlier count stays in ``OTHER`` as a baseline), and a replaced set's
    whole count moves back into ``OTHER`` (which only grows). The sum over all series is always the true total.
    A label set never summed under ``OTHER`` has no baseline: below the limit every series is exact and no
    ``OTHER`` series exists.

    Task-safety: call ``select`` then ``fold`` from the thread that owns the rows (the event loop).
    """

    def __init__(self, limit: int, labelnames: Sequence[str], capped: Sequence[str], *, ratio: float = 2.0) -> None:
        if limit < 1:
            raise ValueError(f"SeriesCap limit must be at least 1, got {limit}")
        self.limit = limit
        self.ratio = ratio
        self._capped = [list(labelnames).index(name) for name in capped]
        self._kept: dict[tuple[str, ...], float] = {}  # kept label set -> its growth at the last select
        self._previous: dict[tuple[str, ...], float] = {}  # label set -> driver weight at the last select
        self._in_other: set[tuple[str, ...]] = set()  # label sets ever summed under OTHER
        self._other_keys: dict[tuple[str, ...], tuple[str, ...]] = {}  # label set -> its OTHER label set
        self._baselines: dict[tuple[int, tuple[str, ...]], list[float]] = {}  # (family id, label set) -> row

    @property
    def kept(self) -> frozenset[tuple[str, ...]]:
        return frozenset(self._kept)

    def other_key(self, key: tuple[str, ...]) -> tuple[str, ...]:
        okey = self._other_keys.get(key)
        if okey is None:
            out = list(key)
            for i in self._capped:
                out[i] = OTHER
            okey = self._other_keys[key] = tuple(out)
        return okey

    def select(self, weights: Mapping[tuple[str, ...], float]) -> None:
        """Update the kept label sets from the driver family's current values (one call per scrape)."""
        previous = self._previous
        growth = {}
        for key, weight in weights.items():
            growth[key] = weight - previous.get(key, 0.0)
            previous[key] = weight
        kept = self._kept
        for key in kept:
            kept[key] = growth.get(key, 0.0)
        candidates = sorted(
            ((g, key) for key, g in growth.items() if g > 0 and key not in kept), key=lambda item: -item[0]
        )
        if not candidates:
            return
        weakest = sorted((g, key) for key, g in kept.items()) if len(kept) + len(candidates) > self.limit else []
        for g, key in candidates:
            if len(kept) >= self.limit:
                if not weakest or g <= self.ratio * weakest[0][0]:
                    break
                _, victim = weakest.pop(0)
                del kept[victim]
                self._in_other.add(victim)
                for family_key in [k for k in self._baselines if k[1] == victim]:
                    del self._baselines[family_key]
            kept[key] = g

    def fold(self, family: object, rows: Mapping[tuple[str, ...], Sequence[float]]) -> list[tuple[tuple, list]]:
        """``rows`` of one family of the group as exported: kept label sets minus their baseline, then one
        ``OTHER`` row per combination of the uncapped labels."""
        fid = id(family)
        kept, in_other, other_keys = self._kept, self._in_other, self._other_keys
        out: list[tuple[tuple, list]] = []
        other: dict[tuple[str, ...], list[float]] = {}
        for key, row in rows.items():
            if key in kept:
                if key not in in_other:
                    out.append((key, list(row)))
                    continue
                base = self._baselines.get((fid, key))
                if base is None:
                    base = self._baselines[(fid, key)] = list(row)
                out.append((key, [a - b for a, b in zip(row, base)]))
                part: Sequence[float] = base
            else:
                if key not in in_other:
                    in_other.add(key)
                part = row
            okey = other_keys.get(key) or self.other_key(key)
            acc = other.get(okey)
            if acc is None:
                other[okey] = list(part)
            elif len(part) == 1:
                acc[0] += part[0]
            else:
                for i, v in enumerate(part):
                    acc[i] += v
        out.extend(other.items())
        return out


class CappedGroup(Collector):
    """Families that share label sets (``rocketmq_messages_in`` and ``rocketmq_throughput_in``, say), exported
    through one ``SeriesCap`` that the ``driver`` family's values steer, so a topic kept in one family is kept in
    all of them. Register the group instead of its families."""

    def __init__(self, cap: SeriesCap, driver: LoopCounter | BatchHistogram,
                 families: Sequence[LoopCounter | BatchHistogram]) -> None:
        self.cap = cap
        self.driver = driver
        self.families = list(families)
        self._lock = threading.Lock()  # the cap's state: one selection and fold at a time

    def collect(self) -> Iterator[Metric]:
        if deferring_now():  # copy the rows on the loop; rank and fold them in the server thread
            rows = [(family, {key: list(row) for key, row in family.rows().items()}) for family in self.families]
            yield Deferred(lambda: self._finish(rows))
            return
        yield from self._finish([(family, family.rows()) for family in self.families])

    def _finish(self, rows: list[tuple[LoopCounter | BatchHistogram, Mapping]]) -> list[Metric]:
        weight = self.driver.weight
        with self._lock:
            driver_rows = next(r for family, r in rows if family is self.driver)
            self.cap.select({key: weight(row) for key, row in driver_rows.items()})
            return [family.family(self.cap.fold(family, r)) for family, r in rows]

    def describe(self) -> Iterator[Metric]:
        for family in self.families:
            yield from family.describe()


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
                log.warning("metrics collector %s failed: %s (its series are missing from this scrape)", self.name, text)
                self._last_error = text
            return
        self._last_error = ""
        yield from families

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names are dynamic; skip the duplicate check


class _Snapshot:
    """The metric families of one scrape, collected on the loop, for ``generate_latest`` in the server thread."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class _HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """One thread per request, at most ``MAX_CONCURRENT_SCRAPES`` at a time (a connection beyond that is closed
    at once); sockets time out after ``READ_TIMEOUT_S``."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 16

    def __init__(self, address, handler, owner: MetricsServer, family: int) -> None:
        self.address_family = family
        self.owner = owner
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT_SCRAPES)
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S
    server: _HTTPServer

    def do_GET(self) -> None:
        self._serve(head_only=False)

    def do_HEAD(self) -> None:
        self._serve(head_only=True)

    def _refuse_method(self) -> None:
        self._respond(405, b"only GET and HEAD\n", "text/plain")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

    def _serve(self, *, head_only: bool) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        if path == owner.path:
            try:
                body = owner.render()
            except TimeoutError:
                self._respond(503, b"the event loop did not answer in time; try again\n", "text/plain")
                return
            except Exception as exc:  # a collector bug must not kill the handler silently
                log.exception("metrics scrape failed")
                self._respond(500, f"scrape failed: {exc!r}\n".encode(), "text/plain")
                return
            self._respond(200, body, CONTENT_TYPE_PLAIN_0_0_4, head_only=head_only)
        elif path == "/":
            self._respond(200, f"pyrmq metrics: {owner.path}\n".encode(), "text/plain", head_only=head_only)
        else:
            self._respond(404, f"not found; metrics are at {owner.path}\n".encode(), "text/plain", head_only=head_only)

    def _respond(self, status: int, body: bytes, content_type: str, *, head_only: bool = False) -> None:
        self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if not head_only:
                self.wfile.write(body)
        except (ConnectionError, TimeoutError):
            pass

    def log_message(self, format: str, *args) -> None:
        """Scrapes are not logged (one line per scrape interval would drown the broker's log)."""

    def log_error(self, format: str, *args) -> None:
        log.debug("metrics http: " + format, *args)


class MetricsServer(Service):
    """Serve ``registry`` at ``http://host:port/metrics`` from a thread; collect on the event loop, render off it.

    ``host`` empty means every interface (``0.0.0.0``). ``port`` 0 picks a free port; ``bound_port`` tells
    which. ``/`` answers a one-line pointer, anything else 404; only GET and HEAD are served (others 405). Each
    connection answers one request and closes (HTTP/1.1 with ``Connection: close``), which Prometheus handles fine.

    A scrape: the request's thread asks the loop (``call_soon_threadsafe``) for ``registry.collect()``, which
    returns fresh families holding copies of the numbers, then renders them with ``generate_latest`` in the
    thread. The loop's share is the collection alone (``last_snapshot_s``, about 5 ms for 2,000 topics); rendering
    competes with the loop only for the GIL, which the interpreter hands over every switch interval (measured here:
    a CPU-bound thread delays a loop wake-up by at most about 15 ms, however long it runs). A loop that does not
    answer within ``SNAPSHOT_TIMEOUT_S`` gets a 503 instead of a thread stuck forever.
    """

    def __init__(self, registry: Collector, *, host: str = "", port: int = 5557, path: str = "/metrics") -> None:
        super().__init__("MetricsServer")
        self.registry = registry
        self.host = host or "0.0.0.0"
        self.port = port
        self.path = path
        self.bound_port = 0
        self.scrapes = 0
        self.last_snapshot_s = 0.0  # loop time the last scrape's collection took
        self._render_lock = threading.Lock()  # one scrape at a time: deferred state is finished in snapshot order
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.bound_port}{self.path}"

    async def on_start(self) -> None:
        self._loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            self._server = _HTTPServer((self.host, self.port), _Handler, self, family)
        except OSError as exc:
            raise OSError(
                f"metricsPromExporterPort {self.port}: cannot serve metrics on {self.host}:{self.port} "
                f"({exc.strerror or exc}); set metricsPromExporterPort to a free port (0 picks one), or "
                "metricsExporterType=DISABLE turns the exporter off"
            ) from exc
        self.bound_port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="metrics-http", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d%s", self.host, self.bound_port, self.path)

    async def on_stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        await asyncio.to_thread(server.shutdown)  # waits for serve_forever to return (one poll interval)
        server.server_close()
        if thread is not None:
            await asyncio.to_thread(thread.join, 2.0)

    # called in the server's threads ------------------------------------------------------------------------
    def render(self) -> bytes:
        """One scrape: collect on the loop, render here. TimeoutError when the loop does not answer in time."""
        if not self._render_lock.acquire(timeout=SNAPSHOT_TIMEOUT_S):
            raise TimeoutError(f"another scrape took more than {SNAPSHOT_TIMEOUT_S} s")
        try:
            families = finish_all(self._snapshot())
            body = generate_latest(_Snapshot(families))
        finally:
            self._render_lock.release()
        self.scrapes += 1
        return body

    def _snapshot(self) -> list:
        """``registry.collect()`` run on the loop (families and ``Deferred``s); TimeoutError if it cannot."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise TimeoutError("the event loop is gone")
        done: concurrent.futures.Future = concurrent.futures.Future()

        def snapshot() -> None:
            if not done.set_running_or_notify_cancel():
                return
            started = time.perf_counter()
            try:
                with deferring():
                    families = list(self.registry.collect())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which re-raises it
                done.set_exception(exc)
                return
            self.last_snapshot_s = time.perf_counter() - started
            done.set_result(families)

        try:
            loop.call_soon_threadsafe(snapshot)
        except RuntimeError as exc:  # the loop closed under us
            raise TimeoutError(str(exc)) from None
        try:
            return done.result(timeout=SNAPSHOT_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            done.cancel()
            raise TimeoutError(f"no snapshot within {SNAPSHOT_TIMEOUT_S} s") from None
