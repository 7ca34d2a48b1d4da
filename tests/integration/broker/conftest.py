"""Fixtures: one real nameserver and one real master broker per test module, plus a gRPC client per test."""

from __future__ import annotations

import pytest

from tests.integration.broker.rpc import BrokerClient, make_broker
from harness.procs import Namesrv

SHORT_DELAY_LEVELS = "1s 1s 2s"


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    ns = Namesrv(tmp_path_factory.mktemp("namesrv")).start()
    yield ns
    ns.stop()


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    broker = make_broker(
        tmp_path_factory.mktemp("master"),
        name="broker-a",
        namesrv_addr=namesrv.addr,
        messageDelayLevel=SHORT_DELAY_LEVELS,
        brokerSuspendMaxTimeMillis=600_000,  # a pull asking to be held ten minutes is: only an event answers it early
        mappedFileSizeCommitLog=16 * 1024 * 1024,  # room for a 4 MiB body
    ).start()
    yield broker
    broker.stop()


@pytest.fixture
async def client(master):
    c = BrokerClient(master.addr)
    yield c
    await c.close()
