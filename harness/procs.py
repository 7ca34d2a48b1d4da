"""Real nameserver and broker processes on 127.0.0.1 for integration tests (nats-server harness style).

Each process gets its own conf file and log file under a test directory, fixed free ports (so a restarted
broker comes back at the same address), and is ready when its RocketMQ-style boot line appears in the log:
``The Name Server boot success. listen=HOST:PORT ...`` or ``The broker[NAME, HOST:PORT] boot success. ...``.
Stop is TERM then KILL; ``kill()`` is SIGKILL (a crash); ``pause()``/``resume()`` are SIGSTOP/SIGCONT.
Each start and stop is told to ``harness.log_watch.WATCH``, so a test fails when a server logged a programming
error while it ran (``harness.pytest_log_check``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Self

from harness.log_watch import WATCH
from harness.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[1]
NAMESRV_READY = re.compile(r"The Name Server boot success\. listen=(\S+)")
BROKER_READY = re.compile(r"The broker\[(\S+), (\S+)\] boot success\.")
# The HA secret every test broker of this run shares (masters and slaves authenticate each other, as deployments do)
# unless a test configures its own haAuthSecret/haAuthSecretFile or opts out with haUnsafeAllowUnauthenticatedSlaves.
TEST_HA_AUTH_SECRET = secrets.token_hex(32)
HA_AUTH_KEYS = {"haAuthSecret", "haAuthSecretFile", "haUnsafeAllowUnauthenticatedSlaves"}


_RECENT_PORTS: collections.deque[int] = collections.deque(maxlen=1024)
FREE_PORT_TRIES = 100


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (Linux; a common default elsewhere)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


# Ports handed out come from below the ephemeral range: a server restarted on its port (chaos, restart tests)
# cannot then find it taken by the source port of some outgoing connection, which under load happened.
_LOW_PORTS = (10000, _ephemeral_range()[0] - 1)
_rng = random.Random(os.getpid() ^ time.monotonic_ns())  # xdist workers draw different sequences


def free_port() -> int:
    """A port free now and not among the last ports this process handed out: the OS may give the same ephemeral
    port twice in a row, and a broker whose listenPort and haListenPort coincide does not boot. Taken from below
    the ephemeral range when there is room (see ``_LOW_PORTS``), else from the OS's ephemeral ports."""
    lo, hi = _LOW_PORTS
    for _ in range(FREE_PORT_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if hi - lo >= 1000:
                try:
                    s.bind(("127.0.0.1", _rng.randint(lo, hi)))
                except OSError:
                    continue
            else:
                s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _RECENT_PORTS:
            _RECENT_PORTS.append(port)
            return port
    raise RuntimeError(
        f"free_port: the OS offered {FREE_PORT_TRIES} ephemeral ports in a row that this process had already handed"
        f" out (it remembers its last {_RECENT_PORTS.maxlen}); is the ephemeral port range nearly used up?"
    )


class PortConflict(RuntimeError):
    """The server could not bind a port the harness picked (another process took it meanwhile)."""


def write_conf(path: Path, values: dict[str, object]) -> Path:
    """Write ``key=value`` lines, readable by this user only: a broker conf may hold ``haAuthSecret`` inline."""
    lines = []
    for key, value in values.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        lines.append(f"{key}={value}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file existed with a wider mode
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


class ServerProcess:
    """One server subprocess. Restartable: ``start()`` again after ``stop()``/``kill()`` reuses conf and ports."""

    def __init__(self, module: str, conf_path: Path, log_path: Path, ready: re.Pattern[str]) -> None:
        self.module = module
        self.conf_path = conf_path
        self.log_path = log_path
        self.ready = ready
        self.proc: subprocess.Popen | None = None
        self._log_offset = 0
        self.booted_once = False

    def start(self, timeout_s: float = 20.0) -> ServerProcess:
        """Start and wait for the boot line.

        ``free_port`` releases a port before the server binds it, so on a busy machine another process can take
        it first. Only on the very first start (a restart must come back at the same address) a port conflict
        is retried with fresh ports.
        """
        for attempt in range(4):
            try:
                return self._start_once(timeout_s)
            except PortConflict:
                if self.booted_once or attempt == 3:
                    raise
                self.reassign_ports()
        raise AssertionError("unreachable")

    def __enter__(self) -> Self:
        """``with Broker(...) as b:`` starts it (unless running) and stops it on the way out, as a fixture's yield."""
        if not self.running():
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reassign_ports(self) -> None:
        """Pick fresh ports and rewrite the conf file (subclasses know their port keys)."""
        raise PortConflict(f"{self.module}: no way to pick other ports")

    def _start_once(self, timeout_s: float) -> ServerProcess:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.module} is already running")
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        WATCH.started(self.log_path, self._log_offset)
        env = dict(os.environ)
        env.pop("NAMESRV_ADDR", None)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "-c", str(self.conf_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(self.log_path.parent),
            env=env,
        )
        log.close()

        def booted() -> bool:
            if self.proc.poll() is not None:
                output = self.new_output()
                if "in use" in output or "already in use" in output:
                    raise PortConflict(output[-2000:])
                raise RuntimeError(f"{self.module} exited with {self.proc.returncode}:\n{self.log_tail()}")
            return bool(self.ready.search(self.new_output()))

        try:
            wait_until(booted, timeout_s, lambda: f"{self.module} did not boot:\n{self.log_tail()}")
        except AssertionError as exc:
            if isinstance(exc.__cause__, PortConflict):
                raise exc.__cause__ from None
            raise
        self.booted_once = True
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def new_output(self) -> str:
        """Log text written since the last start."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                return fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code."""
        try:
            if self.proc is None or self.proc.poll() is not None:
                return self.proc.returncode if self.proc else None
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(timeout=5)
        finally:
            WATCH.stopped(self.log_path)  # its last words are read before a test can remove its directory

    def kill(self) -> None:
        """SIGKILL: a crash, no flush, no checkpoint."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        WATCH.stopped(self.log_path)

    def pause(self) -> None:
        if self.running():
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running():
            os.kill(self.pid, signal.SIGCONT)


class ListeningProcess(ServerProcess):
    """A server at 127.0.0.1:``listenPort`` with a /metrics port (``metricsPromExporterPort``): ``values`` is its
    conf, written to ``conf_path``; a port conflict on the first start picks both ports again. The nameserver's,
    the controller's and (with its HA and gRPC ports) the broker's shape."""

    def __init__(self, module: str, conf_path: Path, log_path: Path, ready: re.Pattern[str],
                 values: dict[str, object]) -> None:
        self.port = int(values["listenPort"])
        self.metrics_port = int(values["metricsPromExporterPort"])
        self._values = values
        super().__init__(module, write_conf(conf_path, values), log_path, ready)

    def reassign_ports(self) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self._values.update(listenPort=self.port, metricsPromExporterPort=self.metrics_port)
        write_conf(self.conf_path, self._values)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


class Namesrv(ListeningProcess):
    def __init__(self, workdir: Path, **conf: object) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        # the KV config (updateTopic -o) stays in the test directory, not in the user's ~/namesrv
        # metrics on (the servers' default is off, as RocketMQ's): tests scrape every process's /metrics
        values = {"listenPort": int(conf.pop("listenPort", 0) or free_port()), "metricsExporterType": "PROM",
                  "metricsPromExporterPort": free_port(), "kvConfigPath": workdir / "kvConfig.json", **conf}
        super().__init__("namesrv", workdir / "namesrv.conf", workdir / "namesrv.log", NAMESRV_READY, values)


class Broker(ListeningProcess):
    def __init__(
        self,
        workdir: Path,
        *,
        name: str,
        namesrv_addr: str,
        role: str = "ASYNC_MASTER",
        broker_id: int = 0,
        cluster: str = "DefaultCluster",
        **conf: object,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        port = int(conf.pop("listenPort", 0) or free_port())
        self.ha_port = int(conf.pop("haListenPort", 0) or free_port())
        self.grpc_port = int(conf.pop("grpcServerPort", None) or free_port())  # the RocketMQ 5 endpoint
        self.store_dir = workdir / "store"
        values: dict[str, object] = {
            "brokerClusterName": cluster,
            "brokerName": name,
            "brokerId": broker_id,
            "brokerRole": role,
            "namesrvAddr": namesrv_addr,
            "brokerIP1": "127.0.0.1",
            "listenPort": port,
            "fastListenPort": 0,  # off: listenPort - 2 is not known to be free (a test may set a free port)
            "haListenPort": self.ha_port,
            "grpcServerPort": self.grpc_port,
            "metricsExporterType": "PROM",  # on for tests, which scrape /metrics (the broker's default is off)
            "metricsPromExporterPort": free_port(),
            "storePathRootDir": str(self.store_dir),
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 10_000,
        }
        if not HA_AUTH_KEYS & conf.keys():
            values["haAuthSecret"] = TEST_HA_AUTH_SECRET
        values.update(conf)
        self.name = name
        self.broker_id = broker_id
        super().__init__("broker", workdir / f"{name}-{broker_id}.conf", workdir / f"{name}-{broker_id}.log",
                         BROKER_READY, values)

    @property
    def grpc_addr(self) -> str:
        """The RocketMQ 5 endpoint (access point of the official RocketMQ 5 clients)."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def ha_addr(self) -> str:
        return f"127.0.0.1:{self.ha_port}"

    def reassign_ports(self) -> None:
        self.port, self.ha_port, self.metrics_port = free_port(), free_port(), free_port()
        self.grpc_port = free_port()
        self._values.update(listenPort=self.port, haListenPort=self.ha_port, metricsPromExporterPort=self.metrics_port,
                            grpcServerPort=self.grpc_port)
        write_conf(self.conf_path, self._values)


@contextlib.contextmanager
def scratch_broker(prefix: str, **broker_conf: object) -> Iterator[tuple[Path, Namesrv, Broker]]:
    """A nameserver and one broker (``broker-bench``) in a new temporary directory, what a benchmark measures
    against: yields (directory, nameserver, broker); afterwards the broker, then the nameserver stop and the
    directory is removed."""
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        with Namesrv(work / "namesrv") as ns:
            with Broker(work / "broker", name="broker-bench", namesrv_addr=ns.addr, **broker_conf) as broker:
                yield work, ns, broker


def wait_port_closed(port: int, timeout_s: float = 10.0) -> None:
    def closed() -> bool:
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", port)) != 0

    wait_until(closed, timeout_s, f"port {port} still accepts connections")


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)
