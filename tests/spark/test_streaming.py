"""Streaming: admission control under Trigger.AvailableNow, and the sink's dedup when a batch is replayed."""

from __future__ import annotations

from collections import Counter

import pytest

from harness.spark_cluster import create_topic, read_topic, send
from tests.spark.flaky import FlakyCommitSource

pytestmark = pytest.mark.integration


def test_available_now_reads_everything_in_batches_no_larger_than_max_messages_per_trigger(
    spark, namesrv, broker, tmp_path
):
    topic = "SparkAdmission"
    create_topic(broker.addr, namesrv.addr, topic, queues=4)
    send(broker.addr, topic, {q: [b"x" * 10] * (250 * (q + 1)) for q in range(4)})
    query = (
        spark.readStream.format("pyrmq")
        .options(namesrv=namesrv.addr, topic=topic, startingOffsets="earliest", maxMessagesPerTrigger=700)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert sum(sizes) == 2500
    assert max(sizes) <= 700 and len(sizes) == 4


def test_a_sink_commit_that_fails_after_publishing_is_replayed_without_duplicates(spark, namesrv, broker, tmp_path):
    source, target = "SparkSinkIn", "SparkSinkOut"
    create_topic(broker.addr, namesrv.addr, source, queues=2)
    create_topic(broker.addr, namesrv.addr, target, queues=2)
    send(broker.addr, source, {q: [f"m{q}-{i}".encode() for i in range(300)] for q in range(2)})
    spark.dataSource.register(FlakyCommitSource)

    def run():
        return (
            spark.readStream.format("pyrmq")
            .options(namesrv=namesrv.addr, topic=source, startingOffsets="earliest", maxMessagesPerTrigger=200)
            .load()
            .selectExpr("body", "concat('k', queueOffset) AS keys", "'copied' AS tags")
            .writeStream.format("pyrmq_flaky_commit")
            .options(namesrv=namesrv.addr, topic=target, failCommitMarker=str(tmp_path / "failed-once"),
                     checkpointLocation=str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )

    first = run()
    with pytest.raises(Exception, match="injected: commit of batch 0 fails"):
        first.awaitTermination(120)
    published_before_retry = len(read_topic(broker.addr, target, 2))
    second = run()
    try:
        assert second.awaitTermination(120)
    finally:
        second.stop()

    bodies = Counter(m.body for m in read_topic(broker.addr, target, 2))
    assert published_before_retry == 200
    assert sum(bodies.values()) == 600, f"{sum(bodies.values()) - 600} duplicates"
    assert set(bodies) == {f"m{q}-{i}".encode() for q in range(2) for i in range(300)}


def test_with_commit_offsets_to_broker_the_group_offsets_follow_the_finished_batches(spark, namesrv, broker, tmp_path):
    from harness.spark_cluster import committed_offset
    from harness.waiting import wait_until

    topic = "SparkCommitOffsets"
    create_topic(broker.addr, namesrv.addr, topic, queues=2)
    send(broker.addr, topic, {0: [b"a"] * 30, 1: [b"b"] * 20})

    def committed() -> list[int]:
        return [committed_offset(broker.addr, "spark-lag", topic, q) for q in range(2)]

    query = (
        spark.readStream.format("pyrmq")
        .options(namesrv=namesrv.addr, topic=topic, startingOffsets="earliest", consumerGroup="spark-lag",
                 commitOffsetsToBroker="true")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        # Spark hands a batch's end to the source when it plans the next batch, so the group lags one batch.
        send(broker.addr, topic, {0: [b"c"], 1: [b"d"]})
        query.processAllAvailable()
        wait_until(lambda: committed() == [30, 20], 30, lambda: f"group offsets are {committed()}, not [30, 20]")
    finally:
        query.stop()


def test_identical_rows_in_one_batch_and_in_later_batches_are_all_delivered(spark, namesrv, broker, tmp_path):
    source, target = "SparkSameIn", "SparkSameOut"
    create_topic(broker.addr, namesrv.addr, source, queues=1)
    create_topic(broker.addr, namesrv.addr, target, queues=2)
    send(broker.addr, source, {0: [b"same"] * 100})
    query = (
        spark.readStream.format("pyrmq")
        .options(namesrv=namesrv.addr, topic=source, startingOffsets="earliest", maxMessagesPerTrigger=50)
        .load()
        .select("body")
        .writeStream.format("pyrmq")
        .options(namesrv=namesrv.addr, topic=target, checkpointLocation=str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    got = read_topic(broker.addr, target, 2)
    assert len(got) == 100 and len({m.msg_id for m in got}) == 100
