"""One nameserver per test for the replication process tests; brokers and clients end with the test.

A test starts brokers with helpers.master()/slave() and opens clients with ``connect``; teardown closes the
clients, then stops the brokers, then the nameserver, so a test needs no try/finally, also when it fails half-way
or replaced a client after restarting a broker.
"""

from __future__ import annotations

import pytest

from tests.integration.broker.rpc import BrokerClient
from tests.integration.replication import helpers
from harness.procs import Namesrv


@pytest.fixture
def namesrv(tmp_path):
    with Namesrv(tmp_path / "ns") as ns:  # start() retries a port taken meanwhile with fresh ones
        yield ns


@pytest.fixture(autouse=True)
def stop_brokers(namesrv):
    """Every broker a test started stops before the nameserver it registered with (it unregisters on the way)."""
    yield
    while helpers.STARTED:
        helpers.STARTED.pop().stop()


@pytest.fixture
async def connect(stop_brokers):
    """``connect(addr)``: a BrokerClient closed at teardown, before the brokers stop."""
    opened: list[BrokerClient] = []

    def open_client(addr: str) -> BrokerClient:
        opened.append(BrokerClient(addr))
        return opened[-1]

    yield open_client
    for client in opened:
        await client.close()


@pytest.fixture
def pair(tmp_path, namesrv, connect):
    """``pair(name, role)`` -> (m, s, mc, sc): a master of brokerName ``name``, its slave (brokerId 1, pointed at the
    master's HA port) and a client of each; ``master_conf`` and ``slave_conf`` add broker settings."""

    def start(name: str, role: str = "SYNC_MASTER", master_conf: dict | None = None, slave_conf: dict | None = None):
        m = helpers.master(tmp_path, namesrv, name, role, **(master_conf or {}))
        s = helpers.slave(tmp_path, namesrv, name, haMasterAddress=m.ha_addr, **(slave_conf or {}))
        return m, s, connect(m.addr), connect(s.addr)

    return start
