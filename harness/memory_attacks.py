"""Peers that try to make a server hold memory, for the tests and bench/attack_memory.py: half-sent large remoting
frames kept alive by a trickle of bytes, and requests whose answers are never read. Plain blocking sockets in one
thread each, so they keep attacking whatever the test's event loop does. Also the server's RSS, read from /proc
(its /metrics samples: ``harness.metrics_page``)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

from remoting.codes import RequestCode
from remoting.frame_codec import RemotingCommand, encode

MIB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` now (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class RssPeak:
    """Samples a process's RSS every ``interval_s`` in a thread until ``stop()``; ``peak`` is the largest seen."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.pid = pid
        self.start_rss = self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return

    @property
    def growth(self) -> int:
        return self.peak - self.start_rss

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class PartialFrames:
    """``connections`` peers on ``addr`` that each announce a ``frame`` byte remoting frame, send ``sent`` bytes of it
    (length field included) and then one more byte every ``trickle_s``, never finishing it. ``closed`` counts the
    peers the server closed (EOF, reset, or a refused write); ``closed_at`` is when each noticed, after ``started``."""

    def __init__(self, addr: str, connections: int, *, frame: int = 8 * MIB, sent: int = 4 * MIB,
                 trickle_s: float = 0.5) -> None:
        host, port = addr.rsplit(":", 1)
        self.target = (host, int(port))
        self.connections = connections
        self.frame, self.sent, self.trickle_s = frame, sent, trickle_s
        self.closed_at: list[float] = []
        self.connected = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._peer, daemon=True) for _ in range(connections)]
        self.started = time.monotonic()

    def start(self) -> PartialFrames:
        self.started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    @property
    def closed(self) -> int:
        with self._lock:
            return len(self.closed_at)

    def _peer(self) -> None:
        try:
            sock = socket.create_connection(self.target, timeout=10)
        except OSError:
            self._note_closed()
            return
        with sock:
            with self._lock:
                self.connected += 1
            try:
                sock.sendall(struct.pack(">i", self.frame - 4))
                chunk = b"\0" * (256 * 1024)
                left = self.sent - 4
                while left > 0 and not self._stop.is_set():
                    n = min(left, len(chunk))
                    sock.sendall(chunk[:n])
                    left -= n
                sock.settimeout(0.2)
                while not self._stop.is_set():
                    try:
                        if sock.recv(1) == b"":
                            break  # EOF: the server closed us
                    except TimeoutError:
                        pass
                    if self._stop.wait(self.trickle_s):
                        return
                    sock.sendall(b"\0")
            except OSError:
                pass
            if not self._stop.is_set():
                self._note_closed()

    def _note_closed(self) -> None:
        with self._lock:
            self.closed_at.append(time.monotonic() - self.started)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)


class UnreadAnswers:
    """``connections`` peers that each send ``requests`` requests of ``code`` (default GET_ROUTEINFO_BY_TOPIC for
    ``topic``) as fast as the socket takes them and never read an answer."""

    def __init__(self, addr: str, connections: int, *, requests: int = 20_000, topic: str = "TBW102",
                 code: int = RequestCode.GET_ROUTEINFO_BY_TOPIC, ext: dict[str, str] | None = None) -> None:
        host, port = addr.rsplit(":", 1)
        self.target = (host, int(port))
        self.connections = connections
        self.requests = requests
        frame = b"".join(bytes(part) for part in encode(
            RemotingCommand(code, opaque=1, ext=ext if ext is not None else {"topic": topic})))
        self.batch = frame * 100
        self.sent = 0  # requests sent, over all peers (bumped as they go)
        self.closed = 0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._peer, daemon=True) for _ in range(connections)]

    def start(self) -> UnreadAnswers:
        for t in self._threads:
            t.start()
        return self

    def _peer(self) -> None:
        try:
            sock = socket.create_connection(self.target, timeout=10)
        except OSError:
            return
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # read nothing, and let little pile up here
            sock.settimeout(None)  # a send blocks while the server stops reading us; stop() shuts the socket down
            with self._lock:
                self._sockets.append(sock)
            sent = 0
            try:
                while sent < self.requests and not self._stop.is_set():
                    sock.sendall(self.batch)
                    sent += 100
                    with self._lock:
                        self.sent += 100
            except OSError:
                with self._lock:
                    self.closed += 1
            self._stop.wait()

    def settled(self, quiet_s: float = 1.0) -> bool:
        """True once no peer got a request through for ``quiet_s``: the server stopped reading every one of them
        (or closed it). Poll it; it remembers the last count it saw."""
        now = time.monotonic()
        with self._lock:
            sent = self.sent
        if sent != getattr(self, "_seen", None):
            self._seen, self._since = sent, now
            return False
        return sent > 0 and now - self._since >= quiet_s

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for t in self._threads:
            t.join(timeout=10)
