"""docker-compose.controller.yml as the host reaches it, for its system tests and its failover bench: the compose
tool, a free subnet for a cluster of its own, the services' fixed addresses and the controller's word on a group.

Every container of that file has a fixed address ``<prefix>.<octet>`` on the compose network (``prefix`` is
``PYRMQ_CONTROLLER_NET``, default 10.157.0); the host reaches the network directly (Linux), so nothing is published.
"""

from __future__ import annotations

import ipaddress
import json
import random
import shutil
import subprocess
from pathlib import Path

from controller.client import ControllerClient, ReplicaInfo
from harness.waiting import async_wait_until

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO_ROOT / "docker-compose.controller.yml"
DEFAULT_PREFIX = "10.157.0"
GROUPS = {"broker-a": ("broker-a-1", "broker-a-2", "broker-a-3"), "broker-b": ("broker-b-1", "broker-b-2", "broker-b-3")}
SERVICES = ("etcd-1", "etcd-2", "etcd-3", "namesrv-1", "namesrv-2", *GROUPS["broker-a"], *GROUPS["broker-b"])
# last octet of each pyrmq service's fixed address (docker-compose.controller.yml)
OCTETS = {"namesrv-1": 11, "namesrv-2": 12, "broker-a-1": 21, "broker-a-2": 22, "broker-a-3": 23, "broker-b-1": 31,
          "broker-b-2": 32, "broker-b-3": 33}
BROKER_PORT = 10911


def compose_command() -> list[str] | None:
    """``["docker", "compose"]`` when the plugin is there, else ``["docker-compose"]``, else None."""
    try:
        done = subprocess.run(["docker", "compose", "version"], check=False, capture_output=True, timeout=20)
        if done.returncode == 0:
            return ["docker", "compose"]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return ["docker-compose"] if shutil.which("docker-compose") else None


def free_net_prefix() -> str:
    """A 10.157.x prefix whose /24 no Docker network and no host route uses, so a cluster started for a test or a
    bench collides with nothing (PYRMQ_CONTROLLER_NET)."""
    taken: list[ipaddress.IPv4Network] = []
    ids = subprocess.run(["docker", "network", "ls", "-q"], capture_output=True, text=True, timeout=30).stdout.split()
    if ids:
        out = subprocess.run(["docker", "network", "inspect", *ids], capture_output=True, text=True, timeout=30).stdout
        for net in json.loads(out or "[]"):
            for cfg in (net.get("IPAM") or {}).get("Config") or []:
                try:
                    taken.append(ipaddress.ip_network(cfg.get("Subnet", ""), strict=False))
                except ValueError:
                    pass
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, timeout=10).stdout
    for line in routes.splitlines():
        try:
            net = ipaddress.ip_network(line.split()[0], strict=False)
        except (ValueError, IndexError):
            continue  # "default via ...": not a subnet
        taken.append(net)
    for x in random.sample(range(1, 255), 254):
        candidate = ipaddress.ip_network(f"10.157.{x}.0/24")
        if not any(candidate.overlaps(t) for t in taken):
            return f"10.157.{x}"
    raise RuntimeError("no free 10.157.x.0/24 for the controller-mode cluster's network; set PYRMQ_CONTROLLER_NET")


class ControllerCompose:
    """The cluster's addresses as the host reaches them, and the controller's word on each group."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = prefix
        self.addrs = [f"{prefix}.{OCTETS[s]}:9876" for s in ("namesrv-1", "namesrv-2")]
        self.namesrv = ";".join(self.addrs)
        self.address = {s: f"{prefix}.{o}:{BROKER_PORT}" for s, o in OCTETS.items() if s.startswith("broker")}
        self.broker_by_host = {f"{prefix}.{OCTETS[s]}": g for g, members in GROUPS.items() for s in members}

    def service_at(self, addr: str) -> str:
        return next(s for s, a in self.address.items() if a == addr)

    async def info(self, group: str) -> ReplicaInfo:
        client = ControllerClient(self.addrs, timeout_s=3.0)
        try:
            return await client.replica_info(group)
        finally:
            await client.close()

    async def active(self) -> str | None:
        """The address of the active controller instance (one of the nameservers)."""
        client = ControllerClient(self.addrs, timeout_s=3.0)
        try:
            await client.replica_info(next(iter(GROUPS)))
            return client.active
        finally:
            await client.close()

    async def whole(self, group: str, timeout_s: float) -> ReplicaInfo:
        """Until the group has a master and all three members in its SyncStateSet (a controller taking over or
        still starting is asked again)."""
        last: list[object] = ["not asked yet"]

        async def done() -> ReplicaInfo | None:
            try:
                info = await self.info(group)
            except Exception as exc:  # noqa: BLE001 - no controller active yet: ask again
                last[0] = f"{type(exc).__name__}: {exc}"
                return None
            last[0] = info
            return info if info.master_broker_id and len(info.sync_state_set) == 3 else None

        return await async_wait_until(done, timeout_s,
                                      lambda: f"{group} has a master and 3 in its SyncStateSet; last {last[0]}", 0.5)

    async def await_topic_everywhere(self, admin, group: str, topic: str, timeout_s: float) -> None:
        """Until every member of ``group`` has ``topic`` (so whichever is elected can take its sends)."""

        async def known() -> bool:
            for service in GROUPS[group]:
                configs = await admin.all_topic_configs(self.address[service])
                if topic not in {c.topic_name for c in configs.topic_configs}:
                    return False
            return True

        await async_wait_until(known, timeout_s, f"every member of {group} knows topic {topic}", 0.5)
