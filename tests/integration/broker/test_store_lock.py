"""Two broker processes cannot share a directory (issue 12 item 5): a second broker whose storePathCommitLog is
the first's commitlog refuses to start, naming the directory and the process that holds it. Before, both
answered SEND_OK at the same commitlog offset and one message was silently lost."""

from __future__ import annotations

import asyncio
import sys

import pytest

from remoting.codes import ResponseCode
from tests.integration.broker.rpc import BrokerClient, make_broker, message
from harness.procs import REPO_ROOT, free_port, write_conf

pytestmark = pytest.mark.integration


async def test_a_second_broker_on_the_first_brokers_commitlog_refuses_to_start(tmp_path, namesrv):
    first = make_broker(tmp_path / "a", name="broker-lock-a", namesrv_addr=namesrv.addr).start()
    try:
        commitlog = first.store_dir / "commitlog"
        second_root = tmp_path / "b" / "store"
        conf = write_conf(tmp_path / "b.conf", {
            "brokerName": "broker-lock-b", "namesrvAddr": namesrv.addr, "brokerIP1": "127.0.0.1",
            "listenPort": free_port(), "fastListenPort": 0, "haListenPort": free_port(),
            "grpcServerPort": free_port(), "metricsPromExporterPort": free_port(), "storePathRootDir": str(second_root),
            "storePathCommitLog": str(commitlog), "mappedFileSizeCommitLog": 4 * 1024 * 1024,
        })
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "broker", "-c", str(conf), cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 30)  # a broker that boots never exits
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        stdout, stderr = out.decode(), err.decode()
        assert proc.returncode == 1, stdout + stderr
        error = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(error) == 1, stderr
        assert str(commitlog) in error[0] and f"pid={first.pid}" in error[0] and str(first.store_dir) in error[0]
        assert "boot success" not in stdout
        assert not (second_root / "config").exists()  # refused before it wrote its config files
        c = BrokerClient(first.addr)
        resp = await c.send("LockTopic", 0, [message(b"still mine")])
        assert (resp.code, resp.queue_offset) == (ResponseCode.SUCCESS, 0)
        await c.close()
    finally:
        first.stop()
