"""A slave in its own process, frozen with SIGSTOP: the TCP connection stays up but acks stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from broker.config import BrokerRole
from broker.store.types import PutStatus
from harness.procs import REPO_ROOT
from harness.waiting import async_wait_until
from tests.unit.ha import harness as h

pytestmark = pytest.mark.timeout(60)


def spawn_slave(root, master_addr: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    secret_file = root.parent / "ha-auth-secret"  # a file: a secret on the command line is visible to every user
    secret_file.write_text(h.SECRET + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.ha.slave_main", "--root", str(root), "--master", master_addr,
         "--file-size", str(h.FILE_SIZE), "--cluster", h.CLUSTER, "--broker-name", h.BROKER, "--auth-secret-file",
         str(secret_file)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    line = proc.stdout.readline()
    assert "HA slave ready" in line, line
    return proc


async def test_a_paused_slave_process_makes_sync_puts_answer_flush_slave_timeout_after_slave_timeout(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.SYNC_MASTER, slave_timeout=400)
    proc = spawn_slave(tmp_path / "s", m.ha_addr)
    try:
        await async_wait_until(lambda: m.ha.master.connected_slaves() == 1, 10, "slave process connected")
        assert (await h.put(m, 20)).status is PutStatus.PUT_OK
        os.kill(proc.pid, signal.SIGSTOP)
        start = time.monotonic()
        r = await h.put(m, 20)
        elapsed = time.monotonic() - start
        assert r.status is PutStatus.FLUSH_SLAVE_TIMEOUT, r
        assert elapsed >= 0.35  # it waited its slaveTimeout; how much longer is a timing (bench/), not a fact
        os.kill(proc.pid, signal.SIGCONT)
        # once thawed it acks the backlog and new puts are PUT_OK again
        await async_wait_until(lambda: m.ha.push2slave_max_offset == m.store.max_phy_offset, 10, "slave caught up")
        assert (await h.put(m, 20)).status is PutStatus.PUT_OK
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
        await m.stop()
