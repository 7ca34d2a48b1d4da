"""A real Prometheus server for metrics tests: find (or install) the binary, run it on loopback, query PromQL.

The binary is Debian's ``prometheus`` package (no container registry is reachable here), found or installed by
``harness.debian_pkg`` as root; the caller skips with the returned reason if that is impossible. Each ``PrometheusServer`` gets its own config (scraping the given targets every second),
its own TSDB directory and a free loopback port, and is stopped with TERM then KILL.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from harness import debian_pkg
from harness.procs import free_port
from harness.waiting import wait_until


def find_or_install() -> tuple[str | None, str]:
    """(path, "") when available, else (None, why not): Debian's package, installed when we are root."""
    return debian_pkg.find_or_install("prometheus", "prometheus")


def render_config(jobs: dict[str, list[str]], *, scrape_interval: str = "1s") -> str:
    """A prometheus.yml scraping ``host:port`` targets per job (YAML written by hand: no yaml dependency)."""
    lines = [
        "global:",
        f"  scrape_interval: {scrape_interval}",
        f"  evaluation_interval: {scrape_interval}",
        "  scrape_timeout: 900ms" if scrape_interval == "1s" else f"  scrape_timeout: {scrape_interval}",
        "scrape_configs:",
    ]
    for job, targets in jobs.items():
        lines += [f"  - job_name: {json.dumps(job)}", "    static_configs:",
                  f"      - targets: {json.dumps(targets)}"]
    return "\n".join(lines) + "\n"


class PrometheusServer:
    def __init__(self, binary: str, workdir: Path, jobs: dict[str, list[str]], *, scrape_interval: str = "1s") -> None:
        self.binary = binary
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(render_config(jobs, scrape_interval=scrape_interval))
        self.log_path = workdir / "prometheus.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.workdir),
            )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    return resp.status == 200
            except (urllib.error.URLError, OSError):
                return False

        wait_until(ready, timeout_s, lambda: f"prometheus on {self.url} not ready:\n{self.log_tail()}", 0.2)
        return self

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    # HTTP API ----------------------------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:  # 400 carries the PromQL error in the body
            body = json.loads(exc.read() or b"{}")
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}") from None
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        """Instant query; the result vector (or a one-element list for a scalar)."""
        data = self.api("query", query=promql, time=f"{time.time():.3f}")
        if data["resultType"] in ("vector", "matrix"):
            return data["result"]
        return [{"metric": {}, "value": data["result"]}]

    def value(self, promql: str) -> float | None:
        """The single value of ``promql`` (summed if several series), or None when it has no series."""
        result = self.query(promql)
        if not result:
            return None
        return sum(float(r["value"][1]) for r in result)

    def targets_up(self) -> dict[str, float]:
        return {r["metric"]["instance"]: float(r["value"][1]) for r in self.query("up")}
