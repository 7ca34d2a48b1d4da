"""Fixtures: one real master broker per test module (the nameserver is tests/integration/conftest.py's), plus a
remoting client per test."""

from __future__ import annotations

import pytest

from tests.integration.broker.rpc import BrokerClient, make_broker

SHORT_DELAY_LEVELS = "1s 1s 2s"


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    with make_broker(
        tmp_path_factory.mktemp("master"),
        name="broker-a",
        namesrv_addr=namesrv.addr,
        messageDelayLevel=SHORT_DELAY_LEVELS,
        brokerSuspendMaxTimeMillis=600_000,  # a pull asking to be held ten minutes is: only an event answers it early
        mappedFileSizeCommitLog=16 * 1024 * 1024,  # room for a 4 MiB body
    ) as broker:
        yield broker


@pytest.fixture
async def client(master):
    async with BrokerClient(master.addr) as c:
        yield c
