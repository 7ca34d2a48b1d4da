"""A real etcd process on loopback for controller tests and development (Debian's ``etcd-server`` package).

``EtcdServer(workdir).start()`` runs a one-member etcd with its own data directory, client and peer URLs on free
loopback ports, and returns once ``/health`` answers ``{"health":"true"}``; ``stop()`` is TERM then KILL, each
bounded; ``kill()`` is SIGKILL (a crash: the majority of a one-member cluster is gone); ``pause()``/``resume()``
are SIGSTOP/SIGCONT (an etcd that accepts connections and never answers). ``start()`` after
``stop()``/``kill()`` restarts it on the same ports and data, so the store's revisions survive as in production.
``ensure_etcd()`` finds the binary or installs the package (``harness.debian_pkg``); tests skip with its reason.

``EtcdCluster(workdir, members=3)`` runs an N-member cluster on loopback (each member an ``EtcdServer`` that names
all peers in ``--initial-cluster``), started together and healthy once a leader is elected; ``kill(k)``/``start()``
of single members lose and restore its majority as in production.
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from harness.debian_pkg import find_or_install
from harness.procs import free_port
from harness.waiting import wait_until


def ensure_etcd() -> tuple[str | None, str]:
    """(path to etcd, "") or (None, why it is unavailable)."""
    return find_or_install("etcd", "etcd-server")


class EtcdServer:
    def __init__(self, workdir: Path, *, binary: str = "etcd", name: str = "etcd0") -> None:
        self.binary = binary
        self.name = name
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / f"{name}.data"
        self.log_path = self.workdir / f"{name}.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.initial_cluster = ""  # name=peerURL,...; empty: a one-member cluster of its own

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def endpoint(self) -> str:
        """``host:port`` of the client URL, as ``controllerStoreEtcdEndpoints`` takes it."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def start(self, timeout_s: float = 30.0) -> EtcdServer:
        self.launch()
        wait_until(self.healthy, timeout_s, lambda: f"etcd on {self.url} not healthy:\n{self.log_tail()}", 0.1)
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to be healthy (members of a cluster start together)."""
        peer = self.peer_url
        state = "existing" if (self.data_dir / "member").exists() else "new"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--name={self.name}",
                    f"--data-dir={self.data_dir}",
                    f"--listen-client-urls={self.url}",
                    f"--advertise-client-urls={self.url}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster={self.initial_cluster or f'{self.name}={peer}'}",
                    f"--initial-cluster-state={state}",
                    "--initial-cluster-token=pyrmq-test",
                    "--log-level=warn",
                    "--logger=zap",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.workdir),
                start_new_session=True,
            )

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as resp:
                return json.load(resp).get("health") == "true"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def pause(self) -> None:
        """SIGSTOP: an etcd that accepts connections and answers nothing (a slow or hung store)."""
        if self.running:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 10.0) -> None:
        if not self.running:
            return
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class EtcdCluster:
    """``members`` etcd processes forming one cluster on loopback."""

    def __init__(self, workdir: Path, *, members: int = 3, binary: str = "etcd") -> None:
        self.members = [EtcdServer(workdir, binary=binary, name=f"etcd{i}") for i in range(members)]
        peers = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            m.initial_cluster = peers

    @property
    def endpoints(self) -> str:
        """Every member's ``host:port``, ``;``-separated, as ``controllerStoreEtcdEndpoints`` takes them."""
        return ";".join(m.endpoint for m in self.members)

    def start(self, timeout_s: float = 60.0) -> EtcdCluster:
        for m in self.members:
            if not m.running:
                m.launch()
        wait_until(lambda: all(m.healthy() for m in self.members if m.running), timeout_s,
                   lambda: "etcd cluster not healthy:\n" + "\n".join(m.log_tail(10) for m in self.members), 0.2)
        return self

    def running(self) -> list[EtcdServer]:
        return [m for m in self.members if m.running]

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
