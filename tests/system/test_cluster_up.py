"""The 2m-2s compose cluster comes up healthy and registers both broker groups, reachable from the host."""

from __future__ import annotations

import asyncio
import json

import pytest

from client.admin import AdminClient, ClusterInfo
from harness.waiting import wait_until
from tests.system.cluster import BROKERS, NAMESRV_ADDR, SERVICES


def _cluster_info() -> ClusterInfo:
    """GET_BROKER_CLUSTER_INFO from the host, through the published nameserver port."""

    async def read() -> ClusterInfo:
        async with AdminClient(NAMESRV_ADDR, timeout_s=5.0) as admin:
            return await admin.cluster_info()

    return asyncio.run(read())


def _expected_addrs() -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for name, broker_id, listen_port, _ in BROKERS.values():
        out.setdefault(name, {})[broker_id] = f"127.0.0.1:{listen_port}"
    return out


def test_nameserver_lists_both_broker_groups_with_master_and_slave(cluster):
    expected = _expected_addrs()

    def registered():
        info = _cluster_info()
        table = {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}
        return info if all(table.get(name) == addrs for name, addrs in expected.items()) else None

    # Healthy means serving; the first registration may land a moment later.
    info = wait_until(registered, 30, lambda: f"broker groups at {NAMESRV_ADDR}: {_cluster_info()}", interval_s=0.5)
    for name in expected:
        assert info.broker_addr_table[name].cluster == "DefaultCluster"
        assert sorted(info.broker_addr_table[name].broker_addrs) == [0, 1]
    assert {"broker-a", "broker-b"} <= set(info.cluster_addr_table["DefaultCluster"])


@pytest.mark.parametrize("service", SERVICES)
def test_server_is_pid_1_as_rocketmq(cluster, service):
    """Exec-form entrypoint: `docker stop` signals the server itself; it runs as uid/gid 3000."""
    state = cluster.inspect(service)
    assert state["Config"]["User"] == "rocketmq"
    done = cluster.run("exec", "-T", service, "cat", "/proc/1/cmdline", "/proc/1/status")
    module = "namesrv" if service == "namesrv" else "broker"
    assert f"python\x00-m\x00{module}\x00" in done.stdout, done.stdout
    uid_line = next(line for line in done.stdout.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == ["3000"] * 4


_IMAGE_FACTS = """
import json, shutil
from broker.store import index_keys
print(json.dumps({
    "native": None if index_keys.native is None else index_keys.native.__file__,
    "compilers": [c for c in ("gcc", "cc", "x86_64-linux-gnu-gcc", "aarch64-linux-gnu-gcc") if shutil.which(c)],
}))
"""


def test_broker_indexes_with_the_c_module_and_carries_no_compiler(cluster):
    """Dockerfile.broker compiles broker/store/index_native.c in a builder stage and copies only the .so: the
    broker's index takes the C path (1.19x the put path's instructions, against 2.26x in pure Python), and the
    compiler stays out of the image."""
    done = cluster.run("exec", "-T", "broker-a", "python", "-c", _IMAGE_FACTS)
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["native"] is not None, f"{cluster.inspect('broker-a')['Config']['Image']}: index_keys.native is None"
    assert facts["native"].startswith("/opt/pyrmq/"), facts
    assert facts["compilers"] == [], facts


def test_mqctl_finds_the_only_pyrmq_compose_project_without_being_told(cluster):
    """A clone under another directory name (or an mqctl installed elsewhere) still finds the running cluster."""
    from tests.system.harness import mqctl

    result = mqctl("heal", "--settle", "0", env={"COMPOSE_PROJECT_NAME": None})
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"project {cluster.project}" in result.stdout
