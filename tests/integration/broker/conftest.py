"""Fixtures: one real master broker per test module (the nameserver is tests/integration/conftest.py's), plus a
remoting client of it per test. A module that needs another broker overrides ``master`` and keeps ``client``."""

from __future__ import annotations

import pytest

from tests.brokers import broker_fixture
from tests.integration.broker.rpc import BrokerClient

SHORT_DELAY_LEVELS = "1s 1s 2s"


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    yield from broker_fixture(
        tmp_path_factory, namesrv, "broker-a",
        messageDelayLevel=SHORT_DELAY_LEVELS,
        brokerSuspendMaxTimeMillis=600_000,  # a pull asking to be held ten minutes is: only an event answers it early
        mappedFileSizeCommitLog=16 * 1024 * 1024,  # room for a 4 MiB body
    )


@pytest.fixture
async def client(master):
    async with BrokerClient(master.addr) as c:
        yield c
