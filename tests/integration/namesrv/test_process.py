"""``python -m namesrv`` as an operator runs it: config errors, --print-config, readiness line, SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from remoting.client import RemotingClient
from tests.integration.namesrv.conftest import Names, register
from harness.procs import NAMESRV_READY, REPO_ROOT, Namesrv
from tests.ports import taken_port

pytestmark = pytest.mark.integration


def run_namesrv(*args: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "namesrv", *args], check=False, cwd=cwd, env=env, capture_output=True, text=True,
        timeout=30,
    )


def test_unknown_conf_key_exits_2_with_one_line_naming_the_closest_key(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=0\nbrokerChannelExpiredTme=1500\n")
    result = run_namesrv("-c", str(conf), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {conf}: brokerChannelExpiredTme: unknown key; did you mean brokerChannelExpiredTime?"
    ]
    assert "boot success" not in result.stdout


def test_print_config_shows_the_effective_values_and_exits_0(tmp_path):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=19999\n")
    result = run_namesrv("-c", str(conf), "--print-config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "listenPort=19999" in lines and "brokerChannelExpiredTime=120000" in lines
    assert "serverChannelMaxIdleTimeSeconds=120" in lines and "kvConfigPath=~/namesrv/kvConfig.json" in lines
    assert all("=" in line for line in lines)


async def test_sigterm_stops_cleanly_with_exit_0_even_with_a_registered_brokers_connection_open(tmp_path):
    ns = Namesrv(tmp_path).start()
    broker = RemotingClient(name="broker")
    try:
        ready = NAMESRV_READY.search(ns.output())
        assert ready and ready.group(1) == ns.addr
        assert (await register(broker, ns.addr, Names(), topics=["T"])).code == 0
        # exit 0 (SIGKILL after 30 s would not be). That the idle connection does not hold the stop up for the
        # remoting server's grace is shown without a stopwatch in tests/unit/remoting/test_connection.py
        code = ns.stop(timeout_s=30)
    finally:
        await broker.close()
        ns.kill()
    assert code == 0, ns.log_tail()
    assert "nameserver stopped" in ns.output()
    assert "dropped" not in ns.output(), "closing connections at shutdown is no broker failure"


def test_a_taken_port_exits_with_a_line_naming_it(tmp_path):
    with taken_port() as port:
        conf = tmp_path / "namesrv.conf"
        conf.write_text(f"listenPort={port}\nmetricsExporterType=DISABLE\n")
        result = run_namesrv("-c", str(conf), cwd=tmp_path)
    assert result.returncode != 0
    assert f"cannot listen on 0.0.0.0:{port}" in result.stdout + result.stderr
