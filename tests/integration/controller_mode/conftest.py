"""Fixtures of the controller-mode broker tier: a real etcd per test (Debian's etcd-server, installed when
missing) and a nameserver running the controller on it."""

from __future__ import annotations

import pytest

from harness.controller_mode import controller_namesrv
from harness.etcd import EtcdServer, ensure_etcd


@pytest.fixture
def etcd(tmp_path):
    binary, why = ensure_etcd()
    if binary is None:
        pytest.skip(why)
    server = EtcdServer(tmp_path / "etcd", binary=binary)
    with server:
        yield server


@pytest.fixture
def cns(tmp_path, etcd):
    with controller_namesrv(tmp_path / "ns", etcd.endpoint) as ns:
        yield ns
