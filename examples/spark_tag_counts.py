"""Count messages per tag per minute from a pyrmq topic and write the counts to Parquet.

Streaming (default): tumbling 1-minute windows on the broker's store time, a 2-minute watermark, appended to
Parquet as each window closes; restart with the same --checkpoint to continue exactly where it stopped.
Batch (--batch): the whole topic as it is now, written once (overwrite).

    .venv/bin/python examples/spark_tag_counts.py --namesrv 127.0.0.1:9876 --topic TopicTest \\
        --out /tmp/tag-counts --checkpoint /tmp/tag-counts-ckpt

Needs Java 17/21 and the spark extra (pip install -e '.[spark]').
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pyrmq-tag-counts")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    from connectors.spark import register

    register(spark)
    return spark


def per_tag_per_minute(df):
    from pyspark.sql import functions as F

    return (
        df.withColumn("tag", F.coalesce("tags", F.lit("")))
        .groupBy(F.window("storeTimestamp", "1 minute").alias("minute"), "tag")
        .agg(F.count("*").alias("messages"), F.sum(F.length("body")).alias("body_bytes"))
        .select(F.col("minute.start").alias("minute"), "tag", "messages", "body_bytes")
    )


def main() -> int:
    from common.ports import DEFAULT_NAMESRV_ADDR

    ap = argparse.ArgumentParser(description="messages per tag per minute -> Parquet")
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", DEFAULT_NAMESRV_ADDR))
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True, help="Parquet directory")
    ap.add_argument("--checkpoint", help="streaming checkpoint directory (required unless --batch)")
    ap.add_argument("--batch", action="store_true", help="one batch over the whole topic, then exit")
    ap.add_argument("--available-now", action="store_true", help="stream what is there now, then exit")
    args = ap.parse_args()
    spark = session()
    source = spark.read if args.batch else spark.readStream
    df = (
        source.format("pyrmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    if args.batch:
        per_tag_per_minute(df).orderBy("minute", "tag").write.mode("overwrite").parquet(args.out)
        spark.read.parquet(args.out).orderBy("minute", "tag").show(20, truncate=False)
        return 0
    if not args.checkpoint:
        ap.error("--checkpoint is required for streaming")
    counts = per_tag_per_minute(df.withWatermark("storeTimestamp", "2 minutes"))
    writer = (
        counts.writeStream.format("parquet")
        .outputMode("append")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
    )
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="10 seconds")
    query = writer.start()
    print(f"streaming {args.topic} -> {args.out} (query {query.id}); Ctrl-C to stop", flush=True)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
