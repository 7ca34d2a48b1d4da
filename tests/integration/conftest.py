"""The integration tier's shared fixtures: one real nameserver per test module (replication/ starts one per test)
and an SDK admin client on it per test."""

from __future__ import annotations

import pytest

from client import AdminClient
from harness.etcd import EtcdServer, ensure_etcd
from harness.procs import Namesrv


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    with Namesrv(tmp_path_factory.mktemp("namesrv")) as ns:
        yield ns


@pytest.fixture
async def admin(namesrv):
    async with AdminClient(namesrv.addr) as a:
        yield a


@pytest.fixture
def etcd(tmp_path):
    """A real etcd process of its own (Debian's etcd-server, installed when missing), for the controller tiers."""
    binary, why = ensure_etcd()
    if binary is None:
        pytest.skip(why)
    server = EtcdServer(tmp_path / "etcd", binary=binary)
    with server:
        yield server
