"""`mqctl dev up | status | down` for real: five detached processes in a temporary directory."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from ctl.dev_layout import MEMBERS, paths
from ctl.dev_processes import alive
from tests.integration.ctl.cli import mqctl, ok, ok_json
from harness.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REGISTER_TIMEOUT_S = 30.0
SLAVE_SYNC_TIMEOUT_S = 25.0


def test_dev_up_starts_a_two_group_cluster_and_dev_down_stops_every_process(tmp_path: Path):
    root = tmp_path / "dev"
    pids: list[int] = []
    try:
        up = ok("dev", "up", "--dir", str(root), "--commitlog-mb", "4").stdout.splitlines()
        assert up[-1].startswith("NAMESRV_ADDR=127.0.0.1:")
        namesrv = up[-1].removeprefix("NAMESRV_ADDR=")
        assert [line.split()[1] for line in up[:-2]] == [m.name for m in MEMBERS]
        # up waits for the cluster: once it returns both slaves are in sync
        assert up[-2] == "cluster DefaultCluster ready: 2 broker group(s), 4 broker(s) registered, every slave in sync"
        ok("cluster", "wait", "-n", namesrv, "--timeout", "0", "--prometheus", "", "--grafana", "")

        status = ok_json("dev", "status", "--dir", str(root))
        assert [(r["name"], r["status"]) for r in status] == [(m.name, "RUNNING") for m in MEMBERS]
        pids = [r["pid"] for r in status]

        def registered():
            rows = ok_json("clusterList", "-n", namesrv)
            return sorted((r["brokerName"], r["brokerId"]) for r in rows) == [
                ("broker-a", 0),
                ("broker-a", 1),
                ("broker-b", 0),
                ("broker-b", 1),
            ]

        wait_until(registered, REGISTER_TIMEOUT_S, "the dev brokers did not all register")

        again = mqctl("dev", "up", "--dir", str(root))
        assert again.exit_code == 1
        assert again.stderr.startswith(f"error: a dev cluster already runs in {root.resolve()}")
    finally:
        down = mqctl("dev", "down", "--dir", str(root))
    assert down.exit_code == 0, down.stderr
    assert sorted(line.split()[1] for line in down.stdout.splitlines()) == sorted(m.name for m in MEMBERS)
    for member, pid in zip(MEMBERS, pids, strict=True):
        assert not alive(pid, paths(root.resolve(), member)["conf"])
        assert not paths(root.resolve(), member)["pid"].exists()
    status = json.loads(ok("dev", "status", "--dir", str(root), "--json").stdout)
    assert {r["status"] for r in status} == {"STOPPED"}


def test_dev_down_in_an_empty_directory_says_nothing_runs(tmp_path: Path):
    out = ok("dev", "down", "--dir", str(tmp_path)).stdout
    assert out.strip() == f"no dev cluster process runs in {tmp_path.resolve()}"
    assert os.listdir(tmp_path) == []


def addr_of(root: Path, name: str) -> str:
    return (root / name / f"{name}.addr").read_text().strip()


def test_with_a_master_killed_the_slave_serves_reads_and_consumer_progress(tmp_path: Path):
    root = tmp_path / "dev"
    topic, group = "t_failover", "g_failover"
    try:
        up = ok("dev", "up", "--dir", str(root), "--commitlog-mb", "4", "--no-wait").stdout.splitlines()
        assert up[-2].startswith("started broker-b-s")  # --no-wait: no readiness line
        namesrv = up[-1].split("=")[1]
        ok(*f"updateTopic -n {namesrv} -b {addr_of(root, 'broker-b')} -t {topic} -r 1 -w 1".split())
        wait_until(lambda: mqctl("topicRoute", "-n", namesrv, "-t", topic).exit_code == 0, 10, "no route")
        ok(*f"sendMessage -n {namesrv} -t {topic} -p kept -b broker-b".split())
        # the slave serves the topic once its metadata sync (every 10 s) has copied it from the master
        probe = f"consumeMessage -n {namesrv} -t {topic} -g g_probe --from-slave -b broker-b -i 0 -o 0 --timeout 0.5"
        wait_until(lambda: ok_json(*probe.split()), SLAVE_SYNC_TIMEOUT_S, "broker-b-s never served the message")

        os.kill(int((root / "broker-b" / "broker-b.pid").read_text()), signal.SIGKILL)

        def master_gone():
            rows = ok_json("clusterList", "-n", namesrv)
            return [(r["brokerName"], r["brokerId"]) for r in rows if r["brokerName"] == "broker-b"] == [
                ("broker-b", 1)
            ]

        wait_until(master_gone, 20, "the nameserver still lists the killed master broker-b")
        sent = mqctl(*f"sendMessage -n {namesrv} -t {topic} -p lost -b broker-b".split())
        assert sent.exit_code == 1
        assert "no master of broker-b is registered" in sent.stderr

        consumed = ok_json(*f"consumeMessage -n {namesrv} -t {topic} -g {group} --timeout 1".split())
        assert [m["body"] for m in consumed] == ["kept"]
        progress = ok_json("consumerProgress", "-n", namesrv, "-g", group)
        assert progress["diffTotal"] == 0
        assert {q["readFrom"] for q in progress["queues"]} == {addr_of(root, "broker-b-s")}
    finally:
        ok("dev", "down", "--dir", str(root))
    assert not (root / "broker-b" / "broker-b.pid").exists()


def test_dev_up_secure_serves_tls_only_with_acl_and_mqctl_works_with_the_printed_exports(tmp_path: Path):
    root = tmp_path / "dev-secure"
    try:
        up = ok("dev", "up", "--dir", str(root), "--commitlog-mb", "4", "--secure").stdout.splitlines()
        namesrv = next(line for line in up if line.startswith("NAMESRV_ADDR=")).removeprefix("NAMESRV_ADDR=")
        assert "every slave in sync" in "\n".join(up)  # registration, HA and the sync ran over TLS
        ca = root.resolve() / "tls" / "ca.pem"
        assert f"  export MQCTL_TLS=true MQCTL_TLS_CA={ca}" in up
        secret = (root / "admin-secret").read_text().strip()
        assert secret not in "\n".join(up)  # the admin password is never printed
        assert not list((root / "tls").glob("ca.key"))  # nobody can sign more certificates
        env = {"MQCTL_TLS": "true", "MQCTL_TLS_CA": str(ca), "MQCTL_ACCESS_KEY": "admin", "MQCTL_SECRET_KEY": secret}
        rows = json.loads(mqctl("clusterList", "-n", namesrv, "--json", env=env).stdout)
        assert sorted((r["brokerName"], r["brokerId"]) for r in rows) == [
            ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
        # plaintext is refused on the enforcing port; TLS without credentials is refused by the ACL
        plain = mqctl("clusterList", "-n", namesrv)
        assert plain.exit_code == 1 and "connect with --tls" in plain.stderr
        no_user = mqctl("updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", "Nobody",
                        env={"MQCTL_TLS": "true", "MQCTL_TLS_CA": str(ca)})
        assert no_user.exit_code == 1
        assert mqctl("updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", "Admins", env=env).exit_code == 0
    finally:
        down = mqctl("dev", "down", "--dir", str(root))
    assert down.exit_code == 0, down.stderr
