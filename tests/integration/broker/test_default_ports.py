"""One host, default confs (issue 15.4): RocketMQ's quick start on one machine, with pyrmq's processes.

``python -m namesrv`` with no settings and ``python -m broker -c broker.conf`` with only ``namesrvAddr`` and the keys
RocketMQ's 2m-2s-async sample sets all come up: no two default ports collide (the metrics exporter is off unless
configured, as RocketMQ 5's). A second broker group that moves ``listenPort`` and ``storePathRootDir``, as an
operator would, is refused with an error naming the one port it still shares (``grpcServerPort``), and comes up once
that key is set. Every port a server binds, when taken, fails the start with the key to change.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from client import AdminClient, Message, Producer, SendStatus
from harness.procs import BROKER_READY, NAMESRV_READY, REPO_ROOT, ServerProcess, free_port, write_conf
from harness.waiting import async_wait_until
from tests.ports import taken_port

pytestmark = pytest.mark.integration

# RocketMQ's defaults: nameserver 9876; broker listenPort 10911, fastListenPort 10909, haListenPort 10912, and the
# RocketMQ 5 endpoint 8081; the second group's listenPort 11911 moves its fast and HA ports to 11909 and 11912.
DEFAULT_PORTS = (9876, 10909, 10911, 10912, 8081, 11909, 11911, 11912)
SAMPLE = {  # RocketMQ's conf/2m-2s-async/broker-a.properties, plus namesrvAddr as the quick start sets it
    "brokerClusterName": "DefaultCluster",
    "brokerId": 0,
    "deleteWhen": "04",
    "fileReservedTime": 48,
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "namesrvAddr": "127.0.0.1:9876",
}


def taken(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def run(module: str, conf: Path, home: Path) -> subprocess.CompletedProcess:
    """A server that is expected to exit at start (the clash check runs before anything else)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HOME=str(home))
    env.pop("NAMESRV_ADDR", None)
    return subprocess.run([sys.executable, "-m", module, "-c", str(conf)], check=False, cwd=home, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """``~`` of the servers: the default storePathRootDir (~/store) and kvConfigPath (~/namesrv) land here."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    return tmp_path


async def test_a_nameserver_and_two_broker_groups_with_default_confs_share_one_host(home):
    busy = [port for port in DEFAULT_PORTS if taken(port)]
    if busy:
        pytest.skip(f"RocketMQ's default ports {busy} are held by another process on this host; this test needs them")
    started: list[ServerProcess] = []
    try:
        namesrv = ServerProcess("namesrv", write_conf(home / "namesrv.conf", {}), home / "namesrv.log", NAMESRV_READY)
        started.append(namesrv.start())
        broker_a = ServerProcess("broker", write_conf(home / "broker-a.conf", {**SAMPLE, "brokerName": "broker-a"}),
                                 home / "broker-a.log", BROKER_READY)
        started.append(broker_a.start())
        assert "metrics=disabled" in broker_a.output() and "metrics=disabled" in namesrv.output()

        b_conf = {**SAMPLE, "brokerName": "broker-b", "listenPort": 11911, "storePathRootDir": str(home / "store-b")}
        refused = run("broker", write_conf(home / "broker-b.conf", b_conf), home)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.count("\n") == 1, refused.stderr  # one clash, one line
        assert "grpcServerPort 8081 is in use" in refused.stderr
        assert f"set grpcServerPort to a free port in {home / 'broker-b.conf'}" in refused.stderr
        assert not (home / "store-b").exists()  # refused before the store was touched

        b_conf["grpcServerPort"] = free_port()
        broker_b = ServerProcess("broker", write_conf(home / "broker-b.conf", b_conf), home / "broker-b.log",
                                 BROKER_READY)
        started.append(broker_b.start())

        async with AdminClient("127.0.0.1:9876") as admin:
            async def both_registered():
                masters = await admin.masters("DefaultCluster")
                return masters if set(masters) == {"broker-a", "broker-b"} else None

            masters = await async_wait_until(both_registered, 20, "both broker groups registered with the nameserver")
        assert masters["broker-a"].endswith(":10911") and masters["broker-b"].endswith(":11911")
        # and the quick start's next step works: a producer sends to a topic nobody created
        async with Producer("QuickStartProducer", "127.0.0.1:9876") as producer:
            result = await producer.send(Message("QuickStartTopic", b"Hello RocketMQ"))
        assert result.status is SendStatus.SEND_OK
    finally:
        for proc in reversed(started):
            proc.stop()


BROKER_PORT_KEYS = ["listenPort", "fastListenPort", "haListenPort", "grpcServerPort", "metricsPromExporterPort"]


def broker_conf_around(held: int, key: str, root: Path) -> dict[str, object]:
    """A master conf whose ``key`` lands on ``held`` (directly or through listenPort); other ports free or off."""
    conf: dict[str, object] = {"brokerName": "broker-clash", "listenPort": free_port(), "fastListenPort": 0,
                               "haListenPort": free_port(), "grpcServerPort": 0, "storePathRootDir": str(root / "store")}
    if key == "fastListenPort":  # derived: listenPort - 2
        conf.update(listenPort=held + 2, fastListenPort=-1)
    elif key == "haListenPort":  # derived: listenPort + 1
        conf.update(listenPort=held - 1, haListenPort=0)
    elif key == "metricsPromExporterPort":
        conf.update(metricsExporterType="PROM", metricsPromExporterPort=held)
    else:
        conf[key] = held
    return conf


@pytest.mark.parametrize("key", BROKER_PORT_KEYS)
def test_a_taken_broker_port_names_the_key_to_change(tmp_path, key):
    with taken_port() as held:
        conf = write_conf(tmp_path / "broker.conf", broker_conf_around(held, key, tmp_path))
        result = run("broker", conf, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "boot success" not in result.stdout
    assert f"{key} {held}" in result.stderr and "is in use" in result.stderr
    assert f"set {key} to a free port in {conf}" in result.stderr
    if key in ("fastListenPort", "haListenPort"):  # a derived port says where it came from
        assert ("listenPort - 2" if key == "fastListenPort" else "listenPort + 1") in result.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("key", ["listenPort", "metricsPromExporterPort"])
def test_a_taken_nameserver_port_names_the_key_to_change(tmp_path, key):
    with taken_port() as held:
        values: dict[str, object] = {"listenPort": free_port(), "metricsExporterType": "PROM",
                                     "metricsPromExporterPort": free_port(), key: held}
        result = run("namesrv", write_conf(tmp_path / "namesrv.conf", values), tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{key} {held} is in use" in result.stderr and f"set {key} to a free port" in result.stderr
    assert "boot success" not in result.stdout
