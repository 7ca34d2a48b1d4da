"""Fixtures of the controller tier: a real etcd process per test (Debian's etcd-server, installed when missing) and
controller processes against it."""

from __future__ import annotations

import pytest

from harness.controller import FAST, Controller


@pytest.fixture
def controller_conf():
    """Overrides of FAST for the ``controllers`` fixture (parametrize indirectly or override in a module)."""
    return {}


@pytest.fixture
def controllers(tmp_path, etcd, controller_conf):
    """Two controller instances on one etcd; whichever wins the lease is active."""
    conf = {**FAST, **controller_conf}
    procs = [Controller(tmp_path / "ctl", etcd.endpoint, name=f"c{i}", **conf) for i in (1, 2)]
    try:
        for proc in procs:
            proc.start()
        yield procs
    finally:
        for proc in procs:
            proc.stop()
