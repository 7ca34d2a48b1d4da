"""Reads from the slave: on the broker's advice for a backlog, and while the master is down."""

from __future__ import annotations

import re
import urllib.request

import pytest

from harness.spark_cluster import create_topic, queue_max, send, topic_configs
from harness.procs import Broker
from harness.waiting import wait_until
from tests.brokers import master_and_slave

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "SparkReplica"
QUEUES = 2
PER_QUEUE = 1500
# accessMessageInMemoryMaxRatio=0 makes every pull "lagging", so the broker advises the slave (id 1).
GROUP_CONF = {
    "slaveReadEnable": True,
    "accessMessageInMemoryMaxRatio": 0,
    "maxTransferCountOnMessageInDisk": 1024,
    "maxTransferBytesOnMessageInDisk": 4 * 1024 * 1024,
    "maxTransferCountOnMessageInMemory": 1024,
    "maxTransferBytesOnMessageInMemory": 4 * 1024 * 1024,
}


@pytest.fixture(scope="module")
def group(tmp_path_factory, namesrv):
    with master_and_slave(tmp_path_factory.mktemp("spark-replica"), namesrv.addr, "broker-r", **GROUP_CONF) as pair:
        master, slave = pair
        create_topic(master.addr, namesrv.addr, TOPIC, queues=QUEUES)
        send(master.addr, TOPIC, {q: [f"r{q}-{i}".encode() for i in range(PER_QUEUE)] for q in range(QUEUES)})
        wait_until(
            lambda: all(queue_max(slave.addr, TOPIC, q) == PER_QUEUE for q in range(QUEUES)),
            60,
            "the slave did not replicate the topic",
        )
        wait_until(lambda: slave_knows_topic(slave.addr), 60, "the slave's metadata sync did not bring the topic")
        yield pair


def slave_knows_topic(addr: str) -> bool:
    return TOPIC in topic_configs(addr)


def messages_out(broker: Broker) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    return sum(float(v) for v in re.findall(r"^rocketmq_messages_out_total\{[^}]*\} (\S+)$", text, re.MULTILINE))


def read_all(spark, namesrv, **options):
    reader = spark.read.format("pyrmq").option("namesrv", namesrv.addr).option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted((r.queueId, r.queueOffset) for r in reader.load().select("queueId", "queueOffset").collect())


EXPECTED = [(q, o) for q in range(QUEUES) for o in range(PER_QUEUE)]


def test_a_backlog_read_follows_the_brokers_advice_to_the_slave(spark, namesrv, group):
    _, slave = group
    before = messages_out(slave)
    assert read_all(spark, namesrv, readFromSlave="auto") == EXPECTED
    assert messages_out(slave) - before > 0, "the slave served nothing"


def test_the_slave_serves_reads_while_the_master_is_down(spark, namesrv, group):
    master, slave = group
    master.kill()
    before = messages_out(slave)
    got = read_all(spark, namesrv, readFromSlave="never", requestTimeoutSeconds=3, readTimeoutSeconds=30)
    assert got == EXPECTED
    assert messages_out(slave) - before >= len(EXPECTED)
