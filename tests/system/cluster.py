"""The docker-compose cluster (docker-compose.yml at the repository root) driven from system tests.

Works with the Compose plugin (``docker compose``) and the old standalone ``docker-compose`` (1.28+). Every
session gets its own project name (``pyrmq-test-<random>``), so containers, the network and the store volumes
never mix with a developer's own ``docker compose up``. The published host ports are those of the compose file
(9876, 10911/10912, 10921/10922, 10931/10932, 10941/10942, 8081-8084, Prometheus 9090 and Grafana 3000 on
127.0.0.1), so one cluster runs at a time.

``up`` is the README's ``docker compose up -d``: no service names, with docker-compose.override.yml when
deploy/images/monitoring.sh wrote one (the plain command reads it), so Prometheus runs on every host and Grafana
where its image could be pulled.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.controller_compose import compose_command  # noqa: F401 - the system tests' compose tool

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
# Written by deploy/images/monitoring.sh where Prometheus or Grafana cannot be pulled; compose reads it by default.
OVERRIDE_FILE = REPO_ROOT / "docker-compose.override.yml"
BUILD_BASE = REPO_ROOT / "deploy" / "images" / "base" / "build-base.sh"
BUILD_IMAGES = REPO_ROOT / "deploy" / "images" / "build.sh"

SERVICES = ("namesrv", "broker-a", "broker-a-s", "broker-b", "broker-b-s")
NAMESRV_ADDR = "127.0.0.1:9876"
# service -> (brokerName, brokerId, listenPort, haListenPort), as in deploy/conf/2m-2s/
BROKERS = {
    "broker-a": ("broker-a", 0, 10911, 10912),
    "broker-a-s": ("broker-a", 1, 10921, 10922),
    "broker-b": ("broker-b", 0, 10931, 10932),
    "broker-b-s": ("broker-b", 1, 10941, 10942),
}
# service -> grpcServerPort (the RocketMQ 5 endpoint), as in deploy/conf/2m-2s/
GRPC_PORTS = {"broker-a": 8081, "broker-a-s": 8082, "broker-b": 8083, "broker-b-s": 8084}
PROMETHEUS_URL = "http://127.0.0.1:9090"
GRAFANA_URL = "http://127.0.0.1:3000"
HOST_PORTS = (
    (9876,)
    + tuple(p for _, _, listen, ha in BROKERS.values() for p in (listen, ha))
    + tuple(GRPC_PORTS.values())
    + (9090,)
)


class ClusterError(RuntimeError):
    pass


def docker_engine_reachable() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], check=False, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def busy_host_ports(ports=HOST_PORTS) -> list[int]:
    """Ports something listens on. SO_REUSEADDR, as docker-proxy binds: connections of an earlier run that
    linger in TIME_WAIT on a published port (the proxy closes first) do not keep the next cluster from starting."""
    busy = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


def base_image() -> str:
    """``$PYRMQ_BASE_IMAGE``, else whatever deploy/images/base/build-base.sh finds or builds (its last line)."""
    if os.environ.get("PYRMQ_BASE_IMAGE"):
        return os.environ["PYRMQ_BASE_IMAGE"]
    done = subprocess.run(["bash", str(BUILD_BASE)], check=False, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0 or not done.stdout.strip():
        raise ClusterError(f"{BUILD_BASE.name} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


def build_images(env: dict[str, str]) -> None:
    """deploy/images/build.sh: the pyrmq images every project of the compose file and every stack uses, and the
    Prometheus image and override where no registry answers (deploy/images/monitoring.sh)."""
    done = subprocess.run(
        ["bash", str(BUILD_IMAGES)],
        check=False,
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise ClusterError(f"{BUILD_IMAGES.name} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-5000:]}")


@dataclass
class ComposeCluster:
    compose: list[str]
    project: str = field(default_factory=lambda: f"pyrmq-test-{secrets.token_hex(4)}")
    env: dict[str, str] = field(default_factory=dict)
    compose_file: Path = COMPOSE_FILE
    services: tuple[str, ...] = SERVICES  # the pyrmq services ``up`` waits for

    # -- plumbing ---------------------------------------------------------------------------------------------
    def files(self) -> list[str]:
        """``-f`` arguments: the compose file, and the override the plain command would read (docker-compose.yml's
        only: another file given with ``-f`` is read alone)."""
        default = self.compose_file == COMPOSE_FILE
        extra = ["-f", str(OVERRIDE_FILE)] if default and OVERRIDE_FILE.exists() else []
        return ["-f", str(self.compose_file), *extra]

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [*self.compose, "-p", self.project, *self.files(), *args]
        done = subprocess.run(
            cmd,
            check=False,
            cwd=REPO_ROOT,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise ClusterError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return done

    def container_id(self, service: str) -> str:
        ids = self.run("ps", "-a", "-q", service).stdout.split()
        if not ids:
            raise ClusterError(f"no container for service {service} in project {self.project}")
        return ids[0]

    def inspect(self, service: str) -> dict:
        out = subprocess.run(
            ["docker", "inspect", self.container_id(service)], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        return json.loads(out)[0]

    def logs(self, tail: int | None = None) -> str:
        args = ["logs", "--no-color"] + (["--tail", str(tail)] if tail else [])
        done = self.run(*args, check=False, timeout=60)
        return done.stdout + done.stderr

    # -- lifecycle --------------------------------------------------------------------------------------------
    def up(self, timeout_s: float = 240) -> None:
        """``up -d`` as the README runs it, then wait until every service it started is healthy."""
        self.run("up", "-d", timeout=timeout_s)
        self.wait_healthy(timeout_s, self.started_services())

    def started_services(self) -> tuple[str, ...]:
        """The pyrmq services, Prometheus, and Grafana when ``up`` started it (its profile was not switched off)."""
        return self.services + ("prometheus",) + (("grafana",) if self.has_service("grafana") else ())

    def has_service(self, service: str) -> bool:
        return bool(self.run("ps", "-a", "-q", service, check=False).stdout.split())

    def wait_healthy(self, timeout_s: float, services: tuple[str, ...] | None = None) -> None:
        """Poll ``docker inspect`` until every service is healthy; fail fast on an exited or unhealthy one.

        ``docker compose up --wait`` does the same, but only the plugin has it.
        """
        services = self.services if services is None else services
        deadline = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        while True:
            for service in services:
                try:
                    state = self.inspect(service)["State"]
                except ClusterError:
                    states[service] = "not created"  # waits on a dependency that is not healthy yet
                    continue
                health = (state.get("Health") or {}).get("Status", "no healthcheck")
                states[service] = health if state["Status"] == "running" else f"{state['Status']} ({state['ExitCode']})"
                if state["Status"] in ("exited", "dead") or health == "unhealthy":
                    last = ((state.get("Health") or {}).get("Log") or [{}])[-1].get("Output", "").strip()
                    raise ClusterError(f"{service} is {states[service]}; last healthcheck: {last or '-'}")
            if all(s == "healthy" for s in states.values()):
                return
            if time.monotonic() >= deadline:
                raise ClusterError(f"not healthy after {timeout_s:.0f}s: {states}")
            time.sleep(1.0)  # poll interval of this wait on docker's health facts (wait_until would not fail fast)

    def down(self) -> None:
        self.run("down", "-v", "--remove-orphans", "-t", "30", check=False, timeout=300)
