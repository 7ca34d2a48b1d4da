"""Exactly once into Spark's file sink across a SIGKILL of the whole driver (JVM and Python workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from harness.spark_cluster import create_topic, send
from harness.spark_session import spark_env
from harness.procs import REPO_ROOT
from harness.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def start_driver(namesrv, topic, checkpoint, output, mode, log_path):
    env = {**os.environ, **spark_env()}
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.driver_app", namesrv, topic, str(checkpoint), str(output), mode],
            cwd=str(REPO_ROOT),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def committed_batches(checkpoint) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def test_a_driver_killed_mid_stream_and_restarted_delivers_every_message_exactly_once(spark, namesrv, broker, tmp_path):
    topic = "SparkExactlyOnce"
    create_topic(broker.addr, namesrv.addr, topic, queues=4)
    sent = send(broker.addr, topic, {q: [f"a{q}-{i}".encode() for i in range(2500)] for q in range(4)})
    checkpoint, output, log_path = tmp_path / "ckpt", tmp_path / "out", tmp_path / "driver.log"

    driver = start_driver(namesrv.addr, topic, checkpoint, output, "run", log_path)
    try:
        wait_until(
            lambda: committed_batches(checkpoint) >= 2,
            120,
            lambda: f"the driver committed no 2 batches; log:\n{log_path.read_text()[-3000:]}",
        )
        sent += send(broker.addr, topic, {q: [f"b{q}-{i}".encode() for i in range(1000)] for q in range(4)})
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    killed_after = committed_batches(checkpoint)
    sent += send(broker.addr, topic, {q: [f"c{q}-{i}".encode() for i in range(500)] for q in range(4)})

    again = start_driver(namesrv.addr, topic, checkpoint, output, "drain", log_path)
    try:
        assert again.wait(timeout=240) == 0, log_path.read_text()[-3000:]
    finally:
        if again.poll() is None:
            os.killpg(again.pid, signal.SIGKILL)

    rows = spark.read.parquet(str(output)).select("queueId", "queueOffset", "body").collect()
    positions = [(r.queueId, r.queueOffset) for r in rows]
    assert killed_after >= 2
    assert len(rows) == sent == 16_000, f"{len(rows)} rows for {sent} messages"
    assert len(set(positions)) == len(positions), "duplicates in the file sink"
    assert {r.body for r in rows} == (
        {f"a{q}-{i}".encode() for q in range(4) for i in range(2500)}
        | {f"b{q}-{i}".encode() for q in range(4) for i in range(1000)}
        | {f"c{q}-{i}".encode() for q in range(4) for i in range(500)}
    )
