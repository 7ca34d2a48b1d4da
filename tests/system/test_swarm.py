"""docker-compose.yml as a swarm stack (README "Swarm"): the cluster comes up, registers, replicates, and a
message goes in and out through the published ports; the store volumes belong to the stack.

These tests publish the compose cluster's host ports, so conftest runs them after every other system test and
takes the session's compose cluster down first (fixture ``no_compose_cluster``).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from harness.waiting import wait_until
from tests.system.cluster import OVERRIDE_FILE, PROMETHEUS_URL, SERVICES, ClusterError, busy_host_ports
from tests.system.harness import await_whole, ok, run_async, unique
from tests.system.swarm import Stack, ha_secret, ipvs_available, single_node_swarm


def _files(*extra: str) -> list[str]:
    # Where make images wrote docker-compose.override.yml (no registry for Prometheus/Grafana), the README adds
    # deploy/stack-offline.yml: the stack reads no override file.
    offline = ["deploy/stack-offline.yml"] if OVERRIDE_FILE.exists() else []
    return ["docker-compose.yml", *extra, *offline]


def _prometheus_up_targets() -> float:
    url = f"{PROMETHEUS_URL}/api/v1/query?" + urllib.parse.urlencode({"query": 'sum(up{job=~"pyrmq-.*"})'})
    with urllib.request.urlopen(url, timeout=5) as resp:
        result = json.load(resp)["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _run_stack(stack: Stack) -> None:
    """Deploy, wait on facts, send and consume one message through the published ports; remove in any case."""
    busy = busy_host_ports()
    if busy:
        pytest.fail(f"host ports {busy} are in use (a compose cluster or another stack?); the stack publishes them")
    try:
        stack.deploy()
        try:
            # Every broker registered under its advertised address, both slaves replicating (authenticated).
            run_async(await_whole, 240)
            topic = unique("swarm")
            ok("updateTopic", "-c", "DefaultCluster", "-t", topic)
            sent = ok("sendMessage", "-t", topic, "-p", "through the swarm", "-b", "broker-a")
            assert "SEND_OK" in sent.stdout, sent.stdout
            got = ok("consumeMessage", "-t", topic, "-c", "1", "-g", unique("swarm_group"))
            assert "through the swarm" in got.stdout, got.stdout
            # Prometheus runs in the stack too and scrapes the five servers by service name.
            wait_until(lambda: _prometheus_up_targets() == len(SERVICES), 60,
                       lambda: f"Prometheus in the stack scrapes {len(SERVICES)} pyrmq targets",
                       interval_s=1.0)
            stores = {f"{stack.name}_{s}-store" for s in SERVICES if s != "namesrv"}
            assert stores <= set(stack.volumes()), stack.volumes()
        except BaseException:
            print(f"stack {stack.name} services: {stack.services()}\n{stack.logs()}")
            raise
    finally:
        stack.remove()


@pytest.fixture
def swarm(no_compose_cluster):
    try:
        with single_node_swarm() as s:
            yield s
    except ClusterError as exc:
        if "swarm worker" in str(exc):
            pytest.skip(str(exc))
        raise


def test_stack_deploy_of_the_compose_file(swarm):
    """`docker stack deploy -c docker-compose.yml pyrmq`: routing mesh, service VIPs, BROKER_IP1=127.0.0.1."""
    if not ipvs_available():
        pytest.skip("this kernel has no IPVS (ip_vs): swarm's routing mesh and service VIPs cannot work here; "
                    "test_stack_on_two_hosts_layout runs the stack without them")
    _run_stack(Stack(_files(), {"BROKER_IP1": "127.0.0.1"}))


def test_stack_on_two_hosts_layout(swarm):
    """The README's multi-host layout on one node carrying both host labels: placement constraints, host-mode
    ports, per-host brokerIP1, DNS round robin, and the HA secret as a swarm secret."""
    swarm.label("pyrmq.host1")
    swarm.label("pyrmq.host2")
    with ha_secret():
        _run_stack(
            Stack(
                _files("deploy/stack-ha-secret.yml", "deploy/stack-hosts.yml"),
                {"PYRMQ_HOST1": "127.0.0.1", "PYRMQ_HOST2": "127.0.0.1"},
            )
        )
