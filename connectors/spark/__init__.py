"""PySpark connector for pyrmq: ``format("pyrmq")`` batch and streaming source and sink.

    from connectors.spark import register
    register(spark)
    df = spark.readStream.format("pyrmq").option("namesrv", "127.0.0.1:9876").option("topic", "T").load()

Importing this package is cheap and has no side effects (no pyspark import, no channels, no threads): Spark's
``pyspark_*`` data-source lookup may import it in every worker. Needs pyspark >= 4.2 and pyarrow.
"""

from __future__ import annotations

from typing import Any

FORMAT = "pyrmq"

__all__ = ["FORMAT", "PyrmqDataSource", "register"]


def register(spark: Any) -> None:
    """Register ``format("pyrmq")`` in ``spark`` (a SparkSession)."""
    from connectors.spark.datasource import PyrmqDataSource

    spark.dataSource.register(PyrmqDataSource)


def __getattr__(name: str) -> Any:
    if name == "PyrmqDataSource":
        from connectors.spark.datasource import PyrmqDataSource

        return PyrmqDataSource
    raise AttributeError(name)
