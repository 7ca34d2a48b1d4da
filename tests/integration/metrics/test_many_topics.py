"""A broker with many auto-created one-message topics stays bounded (issue 12 item 4): before, 2,000 such topics
took 12 GB of preallocated consume-queue files, 4,000 descriptors and a 6.4 MB /metrics page. Real processes:
a nameserver and an ASYNC_MASTER with RocketMQ's default 6 MB consume-queue files, fed through remoting."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics import SERIES_LIMIT
from remoting.codes import ResponseCode
from tests.integration.broker.rpc import BrokerClient, message
from harness.procs import Broker, Namesrv

pytestmark = pytest.mark.integration

TOPICS = 300
OPEN_FILES = 32


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        return resp.read()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def allocated_bytes(directory: Path) -> int:
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, files in os.walk(directory) for f in files)


@pytest.fixture
def broker(tmp_path):
    ns = Namesrv(tmp_path / "namesrv").start()
    b = Broker(tmp_path / "broker", name="broker-many", namesrv_addr=ns.addr,
               mappedFileSizeConsumeQueue=300_000 * 20, maxOpenConsumeQueueFiles=OPEN_FILES).start()
    try:
        yield b
    finally:
        b.stop()
        ns.stop()


async def test_many_one_message_topics_keep_disk_descriptors_and_metrics_bounded(broker):
    client = BrokerClient(broker.addr)
    try:
        assert (await client.send("warm-up", 0, [message(b"w")])).code == ResponseCode.SUCCESS
        fds_at_start = open_fds(broker.pid)
        for start in range(0, TOPICS, 50):
            sends = [client.send(f"auto-{i}", i % 4, [message(b"only")]) for i in range(start, start + 50)]
            assert {r.code for r in await asyncio.gather(*sends)} == {ResponseCode.SUCCESS}
    finally:
        await client.close()

    # Disk: one 4 KiB block per queue written, not a 6 MB preallocated file each (1.8 GB here before).
    assert allocated_bytes(broker.store_dir / "consumequeue") <= (TOPICS + 1) * 2 * 4096
    # Descriptors: at most OPEN_FILES consume-queue files open (2 descriptors each); before, 2 per topic.
    assert open_fds(broker.pid) - fds_at_start <= 2 * OPEN_FILES + 16

    body = await asyncio.to_thread(scrape, broker.metrics_port)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    stored = families["rocketmq_messages_in"]
    topics = {s.labels["topic"] for s in stored.samples}
    assert len(topics) <= SERIES_LIMIT + 1 and "_other" in topics
    assert sum(s.value for s in stored.samples if s.labels["is_system"] == "false") == TOPICS + 1
    for family in families.values():  # no family grows with the topic count
        assert len(family.samples) <= 12 * (SERIES_LIMIT + 4), (family.name, len(family.samples))
    assert len(body) < 400_000, len(body)
