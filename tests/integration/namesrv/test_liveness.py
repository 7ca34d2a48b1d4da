"""Brokers leave the route when the connection they registered over closes (RocketMQ's channel-close path), when it
stays idle past ``serverChannelMaxIdleTimeSeconds``, or when they go silent on an open connection (expiry scan)
(spec rocketmq-replication.md §2.4)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from remoting.client import RemotingClient
from tests.integration.namesrv.conftest import Names, register, route_addrs, route_is
from harness.procs import REPO_ROOT, Namesrv
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration

EXPIRY_MS = 1500
SCAN_MS = 300


@contextlib.contextmanager
def broker_peer_process(namesrv_addr: str, names: Names, out_path, period_ms: int = 200):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.namesrv.broker_peer", namesrv_addr, names.cluster,
             names.broker_name, names.master_addr, names.topic, str(period_ms)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(REPO_ROOT),
            env=env,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)


async def wait_registered(out_path) -> None:
    await async_wait_until(
        lambda: "registered 0" in out_path.read_text(),
        timeout_s=10,
        err_msg=lambda: f"the broker peer did not register: {out_path.read_text()!r}",
    )


@pytest.fixture
def expiring_namesrv(tmp_path):
    """A nameserver of the test's own that drops a broker silent for EXPIRY_MS, scanning every SCAN_MS."""
    with Namesrv(tmp_path / "ns", brokerChannelExpiredTime=EXPIRY_MS, scanNotActiveBrokerInterval=SCAN_MS) as ns:
        yield ns


@pytest.fixture
async def broker_connections():
    """Two brokers' own connections (a RemotingClient each; routes are asked over the ``client`` fixture)."""
    pair = RemotingClient(), RemotingClient()
    yield pair
    for c in pair:
        await c.close()


async def test_broker_silent_beyond_the_expiry_is_dropped_while_a_registering_one_stays(
        expiring_namesrv, broker_connections, client):
    ns, silent_client, live_client = expiring_namesrv, *broker_connections
    silent, live = Names(), Names()
    await register(silent_client, ns.addr, silent, topics=[silent.topic])
    registered_at = time.monotonic()
    await register(live_client, ns.addr, live, topics=[live.topic])

    async def dropped_while_live_registers() -> bool:
        await register(live_client, ns.addr, live, topics=[live.topic])
        return await route_is(client, ns.addr, silent.topic, None)

    await async_wait_until(
        dropped_while_live_registers,
        timeout_s=5,
        err_msg=lambda: f"silent broker still routed after 5 s:\n{ns.log_tail()}",
        interval_s=0.2,
    )
    silent_for_s = time.monotonic() - registered_at
    assert await route_addrs(client, ns.addr, live.topic) == {0: live.master_addr}
    assert silent_for_s >= EXPIRY_MS / 1000 - 0.05, f"dropped after {silent_for_s:.2f}s, before the expiry"
    assert f"broker {silent.master_addr} silent for" in ns.output()
    # like RocketMQ, the expired broker's connection is closed, so a broker that was only frozen notices
    await async_wait_until(lambda: silent_client.cached(ns.addr) is None, 5,
                           "the nameserver kept the expired broker's connection open")


async def test_a_killed_broker_process_leaves_the_route_at_once(namesrv, client, names, tmp_path):
    await register(client, namesrv.addr, names, slave=True)
    out = tmp_path / "peer.out"
    with broker_peer_process(namesrv.addr, names, out) as peer:
        await wait_registered(out)
        assert await route_addrs(client, namesrv.addr, names.topic) == {0: names.master_addr, 1: names.slave_addr}
        peer.send_signal(signal.SIGKILL)
        await async_wait_until(
            lambda: route_is(client, namesrv.addr, names.topic, {1: names.slave_addr}),
            timeout_s=3,
            err_msg=lambda: f"master still routed after its process was killed:\n{namesrv.log_tail()}",
            interval_s=0.02,
        )
    assert f"of broker {names.master_addr} closed; dropped {names.broker_name} id 0" in namesrv.output()


async def test_a_frozen_broker_expires_after_the_timeout_and_returns_when_it_wakes(
        expiring_namesrv, client, names, tmp_path):
    ns, out = expiring_namesrv, tmp_path / "peer.out"
    with broker_peer_process(ns.addr, names, out) as peer:
        await wait_registered(out)
        os.kill(peer.pid, signal.SIGSTOP)  # the connection stays open, the broker goes silent
        stopped_at = time.monotonic()
        await async_wait_until(
            lambda: route_is(client, ns.addr, names.topic, None),
            timeout_s=10,
            err_msg=lambda: f"the frozen broker is still routed:\n{ns.log_tail()}",
        )
        assert time.monotonic() - stopped_at >= EXPIRY_MS / 1000 - 0.25, "dropped before the expiry"
        assert f"broker {names.master_addr} silent for" in ns.output()
        os.kill(peer.pid, signal.SIGCONT)
        await async_wait_until(
            lambda: route_is(client, ns.addr, names.topic, {0: names.master_addr}),
            timeout_s=10,
            err_msg=lambda: f"the woken broker did not come back:\n{out.read_text()}\n{ns.log_tail()}",
        )


async def test_the_late_close_of_an_old_connection_keeps_a_broker_that_registered_over_a_new_one(
        namesrv, names, broker_connections, client):
    """A restarted broker registers over a new connection before the old one's close is noticed. The old
    connection also carried another broker, whose disappearance shows the close was processed."""
    old, new = broker_connections
    witness = Names()
    await register(old, namesrv.addr, names, topics=[names.topic])
    await register(old, namesrv.addr, witness, topics=[witness.topic])
    await register(new, namesrv.addr, names, topics=[names.topic])
    await old.close()
    await async_wait_until(
        lambda: route_is(client, namesrv.addr, witness.topic, None),
        timeout_s=5,
        err_msg=lambda: f"the close of the old connection was not processed:\n{namesrv.log_tail()}",
    )
    assert await route_addrs(client, namesrv.addr, names.topic) == {0: names.master_addr}

    await new.close()  # a clean close by the broker drops it too
    await async_wait_until(
        lambda: route_is(client, namesrv.addr, names.topic, None),
        timeout_s=5,
        err_msg=lambda: f"broker still routed after its only connection closed:\n{namesrv.log_tail()}",
    )


async def test_an_idle_connection_is_closed_and_drops_its_broker_but_a_registering_broker_keeps_its_own(
        tmp_path, broker_connections, client):
    idle_client, live_client = broker_connections
    with Namesrv(tmp_path / "ns", serverChannelMaxIdleTimeSeconds=2) as ns:
        idle, live = Names(), Names()
        await register(idle_client, ns.addr, idle, topics=[idle.topic])
        live_conn = None

        async def idle_dropped_while_live_registers() -> bool:
            nonlocal live_conn
            await register(live_client, ns.addr, live, topics=[live.topic])
            conn = live_client.cached(ns.addr)
            assert live_conn is None or conn is live_conn, "the registering broker's connection was closed"
            live_conn = conn
            return await route_is(client, ns.addr, idle.topic, None)

        await async_wait_until(
            idle_dropped_while_live_registers,
            timeout_s=10,
            err_msg=lambda: f"the idle broker's connection was not closed:\n{ns.log_tail()}",
            interval_s=0.5,
        )
        assert idle_client.cached(ns.addr) is None
        assert await route_addrs(client, ns.addr, live.topic) == {0: live.master_addr}
        assert "idle for 2 s" in ns.output()
