"""The ``/metrics`` HTTP endpoint of every server: stoppable, and it never renders on the event loop.

Why off the loop: a broker with 2,000 topics spent 0.5 to 2.5 s of loop time per scrape formatting 6 MB of text.
So each scrape asks the loop for a snapshot (``registry.collect()`` inside ``common.metrics.deferring``, which
reads loop-owned state such as the route table, HA connections and store offsets without locks or torn reads,
and copies numbers into fresh metric families), then finishes the deferred work and formats the text in the
request's thread (``common.exposition.TextRenderer``).

Why the thread's work must be small too (issue 22 item 7): the thread and the loop share the GIL, and a thread
that computes for a whole switch interval (5 ms) makes the loop wait that long for every wake-up it needs; with
``generate_latest`` (20 ms of CPU per 600-series scrape) sends during back-to-back scrapes had a p99 of 41 ms.
The renderer builds each series' text once and reuses it, and the thread hands the GIL over (``time.sleep(0)``)
every few hundred samples and after each deferred step. ``bench/metrics_bench.py`` measures both halves and the
sends (``--sends``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.server
import logging
import socket
import socketserver
import threading
import time

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from common.exposition import TextRenderer
from common.metrics import deferring, finish_all
from common.service import Service

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0
SNAPSHOT_TIMEOUT_S = 10.0  # a loop that cannot take a snapshot in this long answers 503
MAX_CONCURRENT_SCRAPES = 4  # further connections are closed at once: a scrape flood cannot pile up threads


def _yield_gil() -> None:
    """Let a thread waiting for the GIL (the event loop) run now, not at the end of the switch interval."""
    time.sleep(0)


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
    returns fresh families holding copies of the numbers, then finishes and renders them in the thread. The
    loop's share is the collection alone (``last_snapshot_s``, about 1 ms for 600 series); the thread's share
    (``last_render_s``) competes with the loop only for the GIL, which the thread hands over every few hundred
    samples. A loop that does not answer within ``SNAPSHOT_TIMEOUT_S`` gets a 503 instead of a thread stuck
    forever.
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
        self.last_render_s = 0.0  # server-thread time the last scrape's finishing and rendering took
        self._renderer = TextRenderer()
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
            snapshot = self._snapshot()
            started = time.perf_counter()
            body = self._renderer.render(finish_all(snapshot, _yield_gil), _yield_gil)
            self.last_render_s = time.perf_counter() - started
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
