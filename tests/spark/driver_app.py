"""A streaming driver the exactly-once test starts, SIGKILLs and restarts: pyrmq topic -> Parquet file sink.

    python -m tests.spark.driver_app NAMESRV TOPIC CHECKPOINT OUTPUT (run|drain)

``run`` streams every 200 ms until killed; ``drain`` runs Trigger.AvailableNow and exits 0 when caught up.
Prints ``READY`` once the query is running.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    namesrv, topic, checkpoint, output, mode = argv
    from harness.spark_session import build_session

    spark = build_session(str(Path(checkpoint).parent / "warehouse"))
    df = (
        spark.readStream.format("pyrmq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", 1500)
        .load()
        .select("topic", "brokerName", "queueId", "queueOffset", "body")
    )
    writer = df.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if mode == "drain" else writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    print("READY", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
