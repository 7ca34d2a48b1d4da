"""``PyrmqDataSource``: the Python Data Source registered as ``format("pyrmq")``.

Register once per SparkSession with ``connectors.spark.register(spark)`` (or
``spark.dataSource.register(PyrmqDataSource)``). The name is not ``rocketmq``: a JVM RocketMQ connector on the
classpath would shadow a Python source of the same name.

Only append writes: ``mode("append")``. ``overwrite`` means nothing for a log and is refused; Spark's default
``errorifexists`` is refused by Spark itself.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from connectors.spark.errors import OptionError
from connectors.spark.options import sink_options, source_options
from connectors.spark.schema import spark_schema

FORMAT = "pyrmq"


class PyrmqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        return spark_schema()

    def reader(self, schema):
        from connectors.spark.source import PyrmqBatchReader

        return PyrmqBatchReader(source_options(self.options), schema)

    def streamReader(self, schema):
        from connectors.spark.source import PyrmqStreamReader

        return PyrmqStreamReader(source_options(self.options), schema)

    def writer(self, schema, overwrite: bool):
        from connectors.spark.sink import PyrmqBatchWriter

        _refuse_overwrite(overwrite)
        return PyrmqBatchWriter(sink_options(self.options), schema)

    def streamWriter(self, schema, overwrite: bool):
        from connectors.spark.sink import PyrmqStreamWriter

        _refuse_overwrite(overwrite)
        return PyrmqStreamWriter(sink_options(self.options), schema)


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise OptionError("mode", "overwrite cannot apply to a message log", 'use .mode("append")')
