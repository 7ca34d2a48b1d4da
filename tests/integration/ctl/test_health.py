"""`mqctl cluster wait` against real processes: the shared two-group cluster, and a group whose slave comes late."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.integration.ctl.cli import CLUSTER, mqctl, ok, ok_json
from harness.procs import REPO_ROOT, Broker, Namesrv, free_port
from harness.waiting import wait_until

pytestmark = pytest.mark.integration

BOOT_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 60.0


class Ready(http.server.BaseHTTPRequestHandler):
    """Prometheus's readiness endpoint, as far as `cluster wait` looks at it."""

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        self.send_response(200 if self.path == "/-/ready" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_ready_cluster_prints_the_nameserver_and_only_the_services_that_answer(cluster, prometheus):
    silent = f"127.0.0.1:{free_port()}"  # nothing listens: no Grafana line
    out = ok("cluster", "wait", "-n", cluster.namesrv_addr, "--prometheus", prometheus, "--grafana", silent)
    assert out.stdout.splitlines() == [
        f"cluster {CLUSTER} ready: 2 broker group(s), 4 broker(s) registered, every slave in sync",
        f"NAMESRV_ADDR={cluster.namesrv_addr}",
        f"Prometheus: http://{prometheus}",
    ]
    assert out.stderr == ""
    data = ok_json("cluster", "wait", "-n", cluster.namesrv_addr, "--prometheus", "", "--grafana", silent)
    assert (data["ready"], data["prometheus"], data["grafana"]) == (True, None, None)
    assert sorted(b["addr"] for b in data["brokers"]) == sorted(
        cluster.addr(n) for n in ("broker-a", "broker-a-s", "broker-b", "broker-b-s")
    )


def test_an_unknown_cluster_times_out_saying_no_group_registered(cluster):
    result = mqctl("cluster", "wait", "-n", cluster.namesrv_addr, "-c", "NoSuchCluster", "--timeout", "0")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: cluster NoSuchCluster not ready within 0s: 0 of 2 broker groups registered; check those brokers' logs"
    )


def test_wait_fails_naming_the_missing_slave_then_returns_once_it_is_in_sync(tmp_path: Path):
    name, cluster_name = "broker-w", "WaitCluster"
    namesrv = Namesrv(tmp_path / "namesrv")
    master = slave = None
    try:
        namesrv.start(BOOT_TIMEOUT_S)
        master = Broker(tmp_path / "m", name=name, namesrv_addr=namesrv.addr, role="SYNC_MASTER", broker_id=0,
                        cluster=cluster_name)
        master.start(BOOT_TIMEOUT_S)
        wait_until(lambda: len(ok_json("clusterList", "-n", namesrv.addr)) == 1, BOOT_TIMEOUT_S, "no master registered")

        args = ["cluster", "wait", "-n", namesrv.addr, "-c", cluster_name, "--groups", "1", "--prometheus", "",
                "--grafana", ""]
        missing = mqctl(*args, "--timeout", "1")
        assert missing.exit_code == 1
        assert missing.stderr == (
            f"error: cluster {cluster_name} not ready within 1s: {name}: 0 of 1 slaves registered; check those "
            f"brokers' logs, `mqctl clusterList` and `mqctl haStatus -c {cluster_name}`, or wait longer with "
            "--timeout\n"
        )

        # the real console script waits; its first progress line shows it is blocked on the slave
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctl.app", *args, "--timeout", str(READY_TIMEOUT_S), "--progress"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        try:
            first = proc.stderr.readline()
            assert first.startswith(f"waiting for {cluster_name}") and f"{name}: 0 of 1 slaves registered" in first
            slave = Broker(tmp_path / "s", name=name, namesrv_addr=namesrv.addr, role="SLAVE", broker_id=1,
                           cluster=cluster_name)
            slave.start(BOOT_TIMEOUT_S)
            stdout, stderr = proc.communicate(timeout=READY_TIMEOUT_S + 10)
        finally:
            proc.kill()
        assert proc.returncode == 0, stderr
        assert stdout.splitlines() == [
            f"cluster {cluster_name} ready: 1 broker group(s), 2 broker(s) registered, every slave in sync",
            f"NAMESRV_ADDR={namesrv.addr}",
        ]
        assert stderr.splitlines()[-1] == f"cluster {cluster_name} ready"
    finally:
        for proc_ in (slave, master, namesrv):
            if proc_ is not None:
                proc_.stop()
