"""The integration tier's shared fixtures: one real nameserver per test module (replication/ starts one per test)
and an SDK admin client on it per test."""

from __future__ import annotations

import pytest

from client import AdminClient
from harness.procs import Namesrv


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    with Namesrv(tmp_path_factory.mktemp("namesrv")) as ns:
        yield ns


@pytest.fixture
async def admin(namesrv):
    async with AdminClient(namesrv.addr) as a:
        yield a
