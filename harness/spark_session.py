"""The local SparkSession configuration shared by the Spark tier and its benchmark (spec/spark-connector.md §7):
local[2], UI off, serial GC, the driver on 127.0.0.1, and pyrmq's data source registered."""

from __future__ import annotations

import os
import sys

from harness.procs import REPO_ROOT


def spark_env() -> dict[str, str]:
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


def build_session(warehouse: str):
    """The fast local configuration of spec/spark-connector.md §7."""
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pyrmq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.streaming.numRecentProgressUpdates", "50")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from connectors.spark import register

    register(spark)
    return spark
