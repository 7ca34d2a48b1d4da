"""Spark connector throughput: messages/s through the streaming source (into the noop sink) and the sink.

    .venv/bin/python bench/spark_bench.py [--messages 200000] [--queues 4] [--name spark_bench]

Starts a real nameserver and broker on 127.0.0.1 (maxTransferCount*=1024 so one pull carries up to 1024
messages; the default 32 caps pulls at 32 KiB-ish batches), preloads 1 KiB messages, then measures in one
local[2] SparkSession:

- source: ``readStream.format("pyrmq")`` -> ``noop``, Trigger.AvailableNow; rows / addBatch time and rows / wall;
- sink: ``spark.range(n)`` -> 1 KiB bodies -> ``write.format("pyrmq")`` (dedup sends); rows / wall.

Prints a table and writes ``bench/results/<name>.json`` (bench/report.py). Never pass/fail. The 1-minute load
average is recorded too: on a shared 2-core machine the figures move with it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import print_table, write_json
from harness.spark_cluster import create_topic, read_topic, send
from harness.spark_session import build_session
from harness.procs import scratch_broker

BODY = b"x" * 1024


def source_run(spark, namesrv: str, topic: str, ckpt: str) -> dict:
    start = time.perf_counter()
    query = (
        spark.readStream.format("pyrmq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(600)
    wall = time.perf_counter() - start
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    add_ms = sum(p["durationMs"].get("addBatch", 0) for p in progress)
    query.stop()
    return {
        "rows": rows,
        "batches": len(progress),
        "addBatch_s": add_ms / 1000,
        "wall_s": wall,
        "rows_per_s_addBatch": rows / (add_ms / 1000) if add_ms else 0.0,
        "rows_per_s_wall": rows / wall,
    }


def sink_run(spark, namesrv: str, topic: str, n: int) -> dict:
    df = spark.range(n, numPartitions=2).selectExpr(
        "CAST(repeat('x', 1024) AS BINARY) AS body", "CAST(id AS STRING) AS keys"
    )
    start = time.perf_counter()
    df.write.format("pyrmq").mode("append").option("namesrv", namesrv).option("topic", topic).save()
    wall = time.perf_counter() - start
    return {"rows": n, "wall_s": wall, "rows_per_s_wall": n / wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--name", default="spark_bench", help="results file: bench/results/<name>.json")
    args = ap.parse_args()
    results: dict = {"messages": args.messages, "queues": args.queues, "body_bytes": len(BODY)}
    with scratch_broker(
        "pyrmq-spark-bench-",
        mappedFileSizeCommitLog=256 * 1024 * 1024,
        mappedFileSizeConsumeQueue=20 * 300_000,
        maxTransferCountOnMessageInMemory=1024,
        maxTransferBytesOnMessageInMemory=4 * 1024 * 1024,
    ) as (work, ns, broker):
        create_topic(broker.addr, ns.addr, "BenchIn", args.queues)
        create_topic(broker.addr, ns.addr, "BenchWarm", 1)
        create_topic(broker.addr, ns.addr, "BenchOut", args.queues)
        per_queue = args.messages // args.queues
        t0 = time.perf_counter()
        send(broker.addr, "BenchIn", {q: [BODY] * per_queue for q in range(args.queues)}, batch=512)
        results["preload_rows_per_s"] = per_queue * args.queues / (time.perf_counter() - t0)
        send(broker.addr, "BenchWarm", {0: [BODY] * 1000})

        t0 = time.perf_counter()
        spark = build_session(str(work / "warehouse"))
        results["session_start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        source_run(spark, ns.addr, "BenchWarm", str(work / "ckpt-warm"))  # the first Python-DS query pays ~5 s
        results["warmup_query_s"] = time.perf_counter() - t0
        results["source"] = source_run(spark, ns.addr, "BenchIn", str(work / "ckpt-in"))
        sink_run(spark, ns.addr, "BenchOut", 2_000)  # warm the write path
        results["sink"] = sink_run(spark, ns.addr, "BenchOut", args.messages)
        results["sink_stored"] = len(read_topic(broker.addr, "BenchOut", args.queues)) - 2_000
        spark.stop()

    src, snk = results["source"], results["sink"]
    print_table(
        f"Spark connector: {args.messages:,} x 1 KiB messages, {args.queues} queues, local[2]",
        ["measure", "value", "unit"],
        [
            ["SparkSession start", results["session_start_s"], "s"],
            ["first Python-DS query (warm-up)", results["warmup_query_s"], "s"],
            ["preload over gRPC (512/batch)", results["preload_rows_per_s"], "msg/s"],
            ["source -> noop, per addBatch time", src["rows_per_s_addBatch"], "msg/s"],
            ["source -> noop, per wall time", src["rows_per_s_wall"], "msg/s"],
            ["source micro-batches", src["batches"], "batches"],
            ["sink (dedup sends), per wall time", snk["rows_per_s_wall"], "msg/s"],
            ["sink: stored of written", results["sink_stored"], f"of {snk['rows']:,}"],
        ],
    )
    results["load_average_1m"] = os.getloadavg()[0]
    write_json(args.name, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
