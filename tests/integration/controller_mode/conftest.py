"""Fixtures of the controller-mode broker tier: a real etcd per test (Debian's etcd-server, installed when
missing) and a nameserver running the controller on it."""

from __future__ import annotations

import pytest

from harness.controller_mode import controller_namesrv


@pytest.fixture
def cns(tmp_path, etcd):
    with controller_namesrv(tmp_path / "ns", etcd.endpoint) as ns:
        yield ns
