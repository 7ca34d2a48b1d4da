"""Batch reads over exact offset ranges, and batch writes."""

from __future__ import annotations

import json

import pytest

from harness.spark_cluster import create_topic, read_topic, send

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def topic(broker, namesrv):
    name = "SparkBatchIn"
    create_topic(broker.addr, namesrv.addr, name, queues=3)
    send(broker.addr, name, {q: [f"q{q}-m{i}".encode() for i in range(30)] for q in range(3)}, tags="t1")
    return name


def test_a_batch_read_returns_every_message_with_its_queue_position(spark, namesrv, topic):
    rows = (
        spark.read.format("pyrmq")
        .option("namesrv", namesrv.addr)
        .option("topic", topic)
        .load()
        .select("queueId", "queueOffset", "body", "tags", "brokerName")
        .collect()
    )
    assert len(rows) == 90
    assert {(r.queueId, r.queueOffset) for r in rows} == {(q, i) for q in range(3) for i in range(30)}
    assert all(r.body == f"q{r.queueId}-m{r.queueOffset}".encode() for r in rows)
    assert {r.tags for r in rows} == {"t1"} and {r.brokerName for r in rows} == {"broker-s"}


def test_a_batch_read_between_json_offsets_returns_exactly_that_range(spark, namesrv, topic):
    start = json.dumps({topic: {"broker-s:0": 10, "broker-s:1": 20, "broker-s:2": -2}})
    end = json.dumps({topic: {"broker-s:0": 15, "broker-s:1": 25, "broker-s:2": 3}})
    df = (
        spark.read.format("pyrmq")
        .option("namesrv", namesrv.addr)
        .option("topic", topic)
        .option("startingOffsets", start)
        .option("endingOffsets", end)
        .option("maxMessagesPerPartition", 2)
        .load()
    )
    got = sorted((r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect())
    assert got == [(0, o) for o in range(10, 15)] + [(1, o) for o in range(20, 25)] + [(2, o) for o in range(3)]


def test_an_unknown_option_fails_with_the_closest_known_one(spark, namesrv, topic):
    with pytest.raises(Exception, match="did you mean 'startingOffsets'"):
        (
            spark.read.format("pyrmq")
            .option("namesrv", namesrv.addr)
            .option("topic", topic)
            .option("startingOffset", "earliest")
            .load()
            .count()
        )


def test_a_batch_write_sends_every_row_once_with_its_tags_keys_and_properties(spark, namesrv, broker):
    create_topic(broker.addr, namesrv.addr, "SparkBatchOut", queues=2)
    df = spark.createDataFrame(
        [(f"b{i}".encode(), f"k{i}", "tagA", {"p": str(i)}) for i in range(50)],
        "body binary, keys string, tags string, properties map<string,string>",
    )
    df.write.format("pyrmq").mode("append").option("namesrv", namesrv.addr).option("topic", "SparkBatchOut").save()
    got = read_topic(broker.addr, "SparkBatchOut", 2)
    assert sorted(m.body for m in got) == sorted(f"b{i}".encode() for i in range(50))
    assert all(m.tags == "tagA" and m.properties["p"] == m.keys[1:] for m in got)


def test_the_example_pipeline_counts_messages_per_tag_per_minute(spark, namesrv, broker, tmp_path):
    import importlib.util

    from harness.procs import REPO_ROOT

    spec = importlib.util.spec_from_file_location("spark_tag_counts", REPO_ROOT / "examples" / "spark_tag_counts.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    create_topic(broker.addr, namesrv.addr, "SparkExample", queues=2)
    send(broker.addr, "SparkExample", {0: [b"a"] * 7, 1: [b"bb"] * 5}, tags="red")
    send(broker.addr, "SparkExample", {1: [b"c"] * 4})
    df = spark.read.format("pyrmq").option("namesrv", namesrv.addr).option("topic", "SparkExample").load()
    example.per_tag_per_minute(df).write.parquet(str(tmp_path / "counts"))
    rows = spark.read.parquet(str(tmp_path / "counts")).groupBy("tag").sum("messages", "body_bytes").collect()
    assert {(r["tag"], r["sum(messages)"], r["sum(body_bytes)"]) for r in rows} == {("red", 12, 17), ("", 4, 4)}
