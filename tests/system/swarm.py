"""A Docker swarm stack of docker-compose.yml driven from system tests (the README's "Swarm" section).

``single_node_swarm`` joins nothing and changes nothing it did not create: when the engine is not in a swarm
it initialises a single-node one bound to loopback and leaves it afterwards (removing the docker_gwbridge
network that init created); when the engine already manages a swarm it is used as it is. ``Stack`` deploys
with ``docker stack deploy`` and removes the stack, its store volumes and its network, waiting on each fact.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.waiting import wait_until
from tests.system.cluster import REPO_ROOT, ClusterError

STACK_LABEL = "com.docker.stack.namespace"
HA_SECRET = "pyrmq_ha_auth_secret"  # the external secret deploy/stack-ha-secret.yml names


def docker(*args: str, check: bool = True, timeout: float = 120, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO_ROOT
    )
    if check and done.returncode != 0:
        raise ClusterError(f"docker {' '.join(args)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def swarm_state() -> tuple[str, bool]:
    """(LocalNodeState, this node is a manager)."""
    state, manager = docker("info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}").split()
    return state, manager == "true"


def ipvs_available() -> bool:
    """Swarm's routing mesh and service VIPs need the kernel's IPVS (ip_vs): loaded, or loadable.

    Read on this host, so it assumes the Docker engine runs here (the system tier publishes on 127.0.0.1 anyway).
    """
    if Path("/proc/net/ip_vs").exists() or Path("/proc/sys/net/ipv4/vs").exists():
        return True
    try:
        return subprocess.run(["modprobe", "-n", "ip_vs"], capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class Swarm:
    node_id: str
    created: bool
    labels_added: list[str] = field(default_factory=list)

    def label(self, key: str, value: str = "true") -> None:
        """Add a node label (removed again on leaving when this run added it)."""
        have = docker("node", "inspect", self.node_id, "--format", "{{json .Spec.Labels}}").strip()
        if f'"{key}":' in have:
            return
        docker("node", "update", "--label-add", f"{key}={value}", self.node_id)
        self.labels_added.append(key)


@contextmanager
def single_node_swarm() -> Iterator[Swarm]:
    """This engine as a swarm manager: an existing swarm as it is, else a single-node one made and left here."""
    state, manager = swarm_state()
    if state == "active" and not manager:
        raise ClusterError("this engine is a swarm worker: docker stack deploy needs a manager")
    created = False
    had_gwbridge = bool(docker("network", "ls", "-q", "--filter", "name=^docker_gwbridge$").strip())
    if state != "active":
        # Loopback only: a test must not open the manager port (2377) to the network.
        docker("swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr", "127.0.0.1:2377")
        created = True
    swarm = Swarm(node_id=docker("info", "--format", "{{.Swarm.NodeID}}").strip(), created=created)
    try:
        yield swarm
    finally:
        if swarm.created:
            docker("swarm", "leave", "--force", check=False, timeout=120)
            if not had_gwbridge:
                docker("network", "rm", "docker_gwbridge", check=False)
        else:
            for key in swarm.labels_added:
                docker("node", "update", "--label-rm", key, swarm.node_id, check=False)


@contextmanager
def ha_secret() -> Iterator[None]:
    """The swarm secret deploy/stack-ha-secret.yml expects: created (and removed after) unless it exists."""
    if docker("secret", "ls", "-q", "--filter", f"name={HA_SECRET}").strip():
        yield
        return
    docker("secret", "create", HA_SECRET, "-", stdin=secrets.token_hex(32) + "\n")
    try:
        yield
    finally:
        docker("secret", "rm", HA_SECRET, check=False)


@dataclass
class Stack:
    files: list[str]
    env: dict[str, str]
    name: str = field(default_factory=lambda: f"pyrmq-swarm-{secrets.token_hex(3)}")

    def deploy(self) -> str:
        args = ["stack", "deploy"] + [a for f in self.files for a in ("-c", f)] + [self.name]
        done = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=300, check=False, cwd=REPO_ROOT,
            env={**os.environ, **self.env},
        )
        if done.returncode != 0:
            raise ClusterError(f"docker {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done.stdout + done.stderr

    def services(self) -> dict[str, str]:
        """service (without the stack prefix) -> replicas, e.g. ``1/1``."""
        out = docker("stack", "services", self.name, "--format", "{{.Name}} {{.Replicas}}", check=False)
        return {n.removeprefix(f"{self.name}_"): r for n, r in (line.split() for line in out.splitlines() if line)}

    def volumes(self) -> list[str]:
        return docker("volume", "ls", "-q", "--filter", f"label={STACK_LABEL}={self.name}").split()

    def logs(self, tail: int = 80) -> str:
        out = []
        for service in self.services():
            done = subprocess.run(
                ["docker", "service", "logs", "--no-trunc", "--tail", str(tail), f"{self.name}_{service}"],
                capture_output=True, text=True, timeout=60, check=False,
            )
            out.append(f"--- {service}\n{done.stdout}{done.stderr}")
        tasks = docker("stack", "ps", self.name, "--no-trunc", check=False)
        return "\n".join(out) + f"\n--- tasks\n{tasks}"

    def remove(self, timeout_s: float = 180) -> None:
        """``docker stack rm``, then wait until its containers and network are gone and delete its volumes."""
        docker("stack", "rm", self.name, check=False)

        def gone() -> bool:
            containers = docker("ps", "-aq", "--filter", f"label={STACK_LABEL}={self.name}", check=False).split()
            networks = docker("network", "ls", "-q", "--filter", f"label={STACK_LABEL}={self.name}", check=False).split()
            return not containers and not networks

        wait_until(gone, timeout_s, f"stack {self.name}'s containers and network removed", interval_s=1.0)
        for volume in self.volumes():
            # A task container that just exited may still hold its volume for a moment.
            wait_until(lambda v=volume: docker("volume", "rm", v, check=False).strip() == v, 30,
                       f"volume {volume} removed", interval_s=0.5)
