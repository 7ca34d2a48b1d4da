"""The Spark tier: one local SparkSession for the whole run (local[2], UI off), real nameserver and broker.

Skipped as a whole when Java, pyspark or pyarrow is missing (the reason says which). The session costs ~1 GB
and 6-7 s to start, plus ~5 s for the first Python data-source query, paid once by the warm-up below.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest

from tests.support.procs import REPO_ROOT, Broker, Namesrv


def _missing() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "the Spark tier needs Java 17 or 21 (no java on PATH and no JAVA_HOME)"
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"the Spark tier needs {module} (pip install -e '.[spark]')"
    return None


MISSING = _missing()


def pytest_collection_modifyitems(config, items):
    if MISSING:
        skip = pytest.mark.skip(reason=MISSING)
        for item in items:
            if "tests/spark/" in str(item.fspath).replace(os.sep, "/"):
                item.add_marker(skip)


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


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    if MISSING:
        pytest.skip(MISSING)
    session = build_session(str(tmp_path_factory.mktemp("warehouse")))
    session.range(1).count()  # warm-up: the first JVM job
    yield session
    session.stop()


@pytest.fixture(scope="session")
def namesrv(tmp_path_factory):
    ns = Namesrv(tmp_path_factory.mktemp("spark-namesrv")).start()
    yield ns
    ns.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory, namesrv):
    b = Broker(
        tmp_path_factory.mktemp("spark-broker"),
        name="broker-s",
        namesrv_addr=namesrv.addr,
        maxTransferCountOnMessageInMemory=1024,
        maxTransferBytesOnMessageInMemory=4 * 1024 * 1024,
    ).start()
    yield b
    b.stop()
