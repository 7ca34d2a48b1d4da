"""Fixtures of the compatibility tier (Apache's C++ client from PyPI ``rocketmq`` 0.4.4 against real pyrmq
processes); the helpers are in harness.py, what the client does on the wire in CLIENT_NOTES.md.

The tier skips, saying why, only where the wheel's librocketmq.so cannot load (it exists for x86_64 Linux only).
On x86_64 Linux a venv without the package fails these tests: ``make test`` installs it with the test extras.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from harness.rocketmq5 import Rmq5Client, client_python
from tests.compat import harness
from tests.factories import closing_each

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    if harness.LOAD_ERROR is None:
        return
    skip = pytest.mark.skip(reason=harness.LOAD_ERROR)
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _client_installed():
    if harness.client_missing():
        pytest.fail(harness.INSTALL_HINT, pytrace=False)


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """A broker group shared by a module's tests; each test uses its own topics and consumer groups."""
    g = harness.start_group(tmp_path_factory.mktemp("compat-cluster"))
    yield g
    for proc in g.procs():
        proc.stop()


@pytest.fixture
def own_group(tmp_path):
    """A broker group for one test that kills one of its processes."""
    g = harness.start_group(tmp_path / "cluster")
    yield g
    for proc in g.procs():
        proc.stop()


@pytest.fixture(scope="session")
def cpp_home(tmp_path_factory) -> Path:
    """HOME of this process's C++ clients while they start: the library logs to <HOME>/logs/rocketmq-cpp/."""
    return tmp_path_factory.mktemp("cpp-client-home")


@pytest.fixture
def cpp_producer(cpp_home):
    """``cpp_producer(namesrv_addr)``: a started C++ producer, shut down at teardown."""
    yield from closing_each(lambda namesrv_addr, **kw: harness.CppProducer(namesrv_addr, cpp_home, **kw),
                            harness.CppProducer.shutdown)


@pytest.fixture
def cpp_consumer(tmp_path):
    """``cpp_consumer(namesrv_addr, group, topic, expression)``: a C++ push consumer process in a directory of its
    own, stopped at teardown."""
    workdirs = (tmp_path / f"consumer-{i}" for i in itertools.count())
    yield from closing_each(lambda *args, **kw: harness.CppConsumer(next(workdirs), *args, **kw),
                            harness.CppConsumer.stop)


@pytest.fixture(scope="session")
def python5():
    """An interpreter with the official RocketMQ 5 Python client (its own venv, harness/rocketmq5.py)."""
    return client_python()


@pytest.fixture
def client(python5, tmp_path):
    """``client()``: an official client process with a HOME of its own, closed at teardown."""
    homes = (tmp_path / f"client-{i}" for i in itertools.count())
    yield from closing_each(lambda: Rmq5Client(python5, next(homes)), Rmq5Client.close)
