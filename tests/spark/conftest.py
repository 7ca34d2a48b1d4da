"""The Spark tier: one local SparkSession for the whole run (local[2], UI off), real nameserver and broker.

Skipped as a whole when Java, pyspark or pyarrow is missing (the reason says which). The session costs ~1 GB
and 6-7 s to start, plus ~5 s for the first Python data-source query, paid once by the warm-up below.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from harness.procs import Namesrv
from harness.spark_session import build_session
from tests.brokers import broker_fixture


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
    with Namesrv(tmp_path_factory.mktemp("spark-namesrv")) as ns:
        yield ns


@pytest.fixture(scope="session")
def broker(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-s", maxTransferCountOnMessageInMemory=1024,
                              maxTransferBytesOnMessageInMemory=4 * 1024 * 1024)
