"""The source's row schema, in Spark and in Arrow, and the columns the sink accepts.

| column | Spark type | from the record |
| --- | --- | --- |
| topic | string | the topic read |
| brokerName | string | the broker group (RocketMQ's MessageQueue.brokerName) |
| queueId | int | |
| queueOffset | bigint | logical offset in the queue; unique per (topic, brokerName, queueId) |
| msgId | string | UNIQ_KEY (the producer's client id) when set, else the offsetMsgId |
| keys | string | KEYS as stored: space-separated; null when absent |
| tags | string | TAGS; null when absent |
| body | binary | |
| properties | map<string,string> | every other property (TAGS, KEYS and UNIQ_KEY have columns of their own) |
| bornTimestamp | timestamp | producer clock (epoch ms in the record), UTC |
| storeTimestamp | timestamp | broker clock when stored, UTC |

Timestamps are Spark TIMESTAMPs (microseconds, UTC), not longs, so windows and ``date_trunc`` work directly;
``unix_millis(storeTimestamp)`` gives the broker's long back.

The Arrow schema must *equal* what Spark derives from the Spark schema (pyspark compares them), so it is
derived with pyspark's own ``to_arrow_schema`` from the ``StructType`` Spark hands to the reader, never parsed
from DDL in a worker (that needs a JVM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

COLUMNS = (
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "keys",
    "tags",
    "body",
    "properties",
    "bornTimestamp",
    "storeTimestamp",
)

SINK_COLUMNS = {
    "body": "binary or string (required)",
    "keys": "string (space-separated keys) or array<string>",
    "tags": "string",
    "properties": "map<string,string>",
    "topic": "string (per-row target topic; overrides the topic option)",
}


def spark_schema() -> StructType:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("topic", StringType(), False),
            StructField("brokerName", StringType(), False),
            StructField("queueId", IntegerType(), False),
            StructField("queueOffset", LongType(), False),
            StructField("msgId", StringType(), False),
            StructField("keys", StringType(), True),
            StructField("tags", StringType(), True),
            StructField("body", BinaryType(), False),
            StructField("properties", MapType(StringType(), StringType(), True), False),
            StructField("bornTimestamp", TimestampType(), False),
            StructField("storeTimestamp", TimestampType(), False),
        ]
    )


def arrow_schema(schema: StructType | None = None) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema if schema is not None else spark_schema(), timezone="UTC")
