"""Spark's automatic data-source registration: at the first lookup in a session, Spark imports every top-level
``pyspark_*`` module and registers its ``DefaultSource``, so ``format("pyrmq")`` works without a register call.
Importing it must stay cheap and free of side effects (no channels, no threads)."""

from connectors.spark.datasource import PyrmqDataSource as DefaultSource  # noqa: F401
