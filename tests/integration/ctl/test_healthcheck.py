"""deploy/images/healthcheck.py against real processes: one remoting request, exit 0 and one line when served."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.procs import REPO_ROOT, free_port

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "deploy" / "images" / "healthcheck.py"


def healthcheck(kind: str, addr: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYRMQ_HEALTHCHECK_ADDR": addr, "PYTHONPATH": str(REPO_ROOT), **extra_env}
    return subprocess.run(
        [sys.executable, str(SCRIPT), kind], capture_output=True, text=True, env=env, timeout=30, check=False
    )


def test_a_serving_nameserver_is_healthy_and_counts_its_broker_groups(cluster):
    done = healthcheck("namesrv", cluster.namesrv_addr)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"namesrv at {cluster.namesrv_addr}: ok 2 broker group(s)"


def test_a_serving_broker_is_healthy_and_says_its_role_and_name(cluster):
    done = healthcheck("broker", cluster.addr("broker-a-s"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"broker at {cluster.addr('broker-a-s')}: ok brokerRole=SLAVE, brokerName=broker-a"


def test_nothing_listening_is_unhealthy_with_the_reason():
    addr = f"127.0.0.1:{free_port()}"
    done = healthcheck("broker", addr)
    assert done.returncode == 1
    assert done.stdout.startswith(f"broker at {addr}: ")
    assert len(done.stdout.splitlines()) == 1


def test_a_nameserver_port_asked_as_a_broker_is_unhealthy_not_silent(cluster):
    """A nameserver does not serve GET_BROKER_RUNTIME_INFO: the check must fail (an answer or a timeout), never pass."""
    done = healthcheck("broker", cluster.namesrv_addr, PYRMQ_HEALTHCHECK_TIMEOUT="1")
    assert done.returncode == 1, done.stdout
