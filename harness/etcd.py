"""A real etcd process on loopback for controller tests and development (Debian's ``etcd-server`` package).

``EtcdServer(workdir).start()`` runs a one-member etcd with its own data directory, client and peer URLs on free
loopback ports, and returns once ``/health`` answers ``{"health":"true"}``; ``stop()`` is TERM then KILL, each
bounded; ``kill()`` is SIGKILL (a crash: the majority of a one-member cluster is gone); ``pause()``/``resume()``
are SIGSTOP/SIGCONT (an etcd that accepts connections and never answers). ``start()`` after
``stop()``/``kill()`` restarts it on the same ports and data, so the store's revisions survive as in production.
``ensure_etcd()`` finds the binary or installs the package (``harness.debian_pkg``); tests skip with its reason.
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

    @property
    def endpoint(self) -> str:
        """``host:port`` of the client URL, as ``controllerStoreEtcdEndpoints`` takes it."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def start(self, timeout_s: float = 30.0) -> EtcdServer:
        peer = f"http://127.0.0.1:{self.peer_port}"
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
                    f"--initial-cluster={self.name}={peer}",
                    "--initial-cluster-state=new",
                    "--log-level=warn",
                    "--logger=zap",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.workdir),
                start_new_session=True,
            )
        wait_until(self.healthy, timeout_s, lambda: f"etcd on {self.url} not healthy:\n{self.log_tail()}", 0.1)
        return self

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
