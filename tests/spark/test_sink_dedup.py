"""The sink's idempotence: a write repeated with the same sinkId stores nothing twice, also across a broker
restart (the broker rebuilds its dedup window from the commitlog tail)."""

from __future__ import annotations

import pytest

from harness.spark_cluster import create_topic, read_topic
from harness.procs import Broker

pytestmark = pytest.mark.integration

ROWS = 300


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory, namesrv):
    with Broker(tmp_path_factory.mktemp("spark-dedup"), name="broker-d", namesrv_addr=namesrv.addr) as b:
        yield b


def write(spark, namesrv, topic: str, sink_id: str) -> None:
    df = spark.createDataFrame([(f"d{i}".encode(), f"k{i}") for i in range(ROWS)], "body binary, keys string")
    (
        df.repartition(2, "keys")
        .write.format("pyrmq")
        .mode("append")
        .option("namesrv", namesrv.addr)
        .option("topic", topic)
        .option("sinkId", sink_id)
        .save()
    )


def test_a_batch_write_repeated_with_the_same_sink_id_stores_every_row_once(spark, namesrv, own_broker):
    create_topic(own_broker.addr, namesrv.addr, "SparkDedupRepeat", queues=2)
    write(spark, namesrv, "SparkDedupRepeat", "job-1")
    write(spark, namesrv, "SparkDedupRepeat", "job-1")
    assert len(read_topic(own_broker.addr, "SparkDedupRepeat", 2)) == ROWS
    write(spark, namesrv, "SparkDedupRepeat", "job-2")
    assert len(read_topic(own_broker.addr, "SparkDedupRepeat", 2)) == 2 * ROWS


def test_a_write_repeated_after_a_broker_restart_stores_every_row_once(spark, namesrv, own_broker):
    create_topic(own_broker.addr, namesrv.addr, "SparkDedupRestart", queues=2)
    write(spark, namesrv, "SparkDedupRestart", "job-r")
    own_broker.kill()
    own_broker.start()
    write(spark, namesrv, "SparkDedupRestart", "job-r")
    got = len(read_topic(own_broker.addr, "SparkDedupRestart", 2))
    assert got == ROWS, f"{got - ROWS} duplicates: the restarted broker forgot its dedup window"
