"""`mqctl dev up --controller` for real: etcd, a nameserver running the controller and two groups of three
controller-mode brokers as detached processes; `mqctl kill master -b broker-a --dir` kills the process the
controller names master, a SyncStateSet member takes over (SEND_OK again), `mqctl start` brings the killed one
back as a slave in the SyncStateSet, and `dev down` stops every process, etcd last."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from client import Message, Producer, SendStatus
from ctl.dev_layout import CONTROLLER_MEMBERS, paths
from ctl.dev_processes import alive
from harness.etcd import ensure_etcd
from harness.waiting import wait_until
from tests.integration.ctl.cli import mqctl, ok, ok_json

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


async def send_ok(namesrv: str, topic: str) -> bool:
    producer = await Producer("dev-controller-producer", namesrv, send_timeout_s=5.0).start()
    try:
        return (await producer.send(Message(topic, b"after-failover"))).status is SendStatus.SEND_OK
    except Exception:  # noqa: BLE001 - not yet: the condition is polled
        return False
    finally:
        await producer.stop()


def test_dev_up_controller_kill_master_elects_a_member_and_the_old_one_rejoins(tmp_path: Path):
    binary, why = ensure_etcd()
    if binary is None:
        pytest.skip(why)
    root = (tmp_path / "dev").resolve()
    try:
        up = ok_json("dev", "up", "--controller", "--dir", str(root), "--commitlog-mb", "4")
        namesrv = up["namesrvAddr"]
        assert up["syncStateSets"] == {"broker-a": [1, 2, 3], "broker-b": [1, 2, 3]}, up
        assert [r["name"] for r in up["processes"]] == [m.name for m in CONTROLLER_MEMBERS]
        assert {r["status"] for r in up["processes"]} == {"RUNNING"}
        [before] = ok_json("getSyncStateSet", "-n", namesrv, "-b", "broker-a")
        ok("updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", "DevFailover", "-r", "2", "-w", "2")

        killed = ok_json("kill", "master", "-b", "broker-a", "--dir", str(root), "--settle", "0")
        victim = killed["process"]
        assert paths(root, next(m for m in CONTROLLER_MEMBERS if m.name == victim))["addr"].read_text().strip() \
            == before["masterAddress"]

        def new_master() -> dict | None:
            [now] = ok_json("getSyncStateSet", "-n", namesrv, "-b", "broker-a")
            return now if now["masterBrokerId"] not in (None, before["masterBrokerId"]) else None

        after = wait_until(new_master, 30, "no new master of broker-a after the kill")
        assert after["masterEpoch"] == before["masterEpoch"] + 1 and after["masterBrokerId"] in before["syncStateSet"]
        wait_until(lambda: asyncio.run(send_ok(namesrv, "DevFailover")), 30, "no SEND_OK from the new master")

        ok("start", victim, "--dir", str(root), "--settle", "0")

        def rejoined() -> bool:
            [now] = ok_json("getSyncStateSet", "-n", namesrv, "-b", "broker-a")
            return sorted(now["syncStateSet"]) == [1, 2, 3] and now["masterBrokerId"] == after["masterBrokerId"]

        wait_until(rejoined, 40, "the restarted broker did not rejoin the SyncStateSet")
    finally:
        status = ok_json("dev", "status", "--dir", str(root)) if root.exists() else []
        down = mqctl("dev", "down", "--dir", str(root))
    assert down.exit_code == 0, down.stderr
    for row, member in zip(status, CONTROLLER_MEMBERS, strict=True):
        if row["pid"] is not None:
            assert not alive(row["pid"], paths(root, member)["conf"]), member.name
