"""One nameserver per test for the replication process tests (test_master_kill.py keeps its own fixture)."""

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
    for attempt in range(3):  # a port from free_port() may be taken meanwhile by another test run on the box
        ns = Namesrv(tmp_path / f"ns{attempt}")
        try:
            ns.start()
            break
        except Exception:
            ns.stop()
            if attempt == 2 or "already in use" not in ns.output():
                raise
    yield ns
    ns.stop()
