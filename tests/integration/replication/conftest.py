"""One nameserver per test for the replication process tests."""

from __future__ import annotations

import pytest

from tests.integration.replication import helpers
from harness.procs import Namesrv


@pytest.fixture(autouse=True)
def stop_leftover_brokers():
    """A test that fails half-way (e.g. while starting its second broker) leaves no broker process behind."""
    yield
    while helpers.STARTED:
        helpers.STARTED.pop().stop()


@pytest.fixture
def namesrv(tmp_path):
    with Namesrv(tmp_path / "ns") as ns:  # start() retries a port taken meanwhile with fresh ones
        yield ns
