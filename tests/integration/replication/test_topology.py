"""Roles per brokerName and how a slave finds its master (DESIGN §4, spec §2.7), with real processes.

Already covered elsewhere (not repeated here): a slave without haMasterAddress learning the HA address from the
registration reply (test_master_kill.py, tests/integration/broker/test_registration.py).
"""

from __future__ import annotations

import pytest

from tests.integration.broker.rpc import message
from tests.integration.replication.helpers import (
    SEND_OK,
    ha,
    master,
    slave,
    wait_caught_up,
    wait_slave_knows_topic,
    wait_slaves_ok,
)
from harness.procs import free_port
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_each_broker_name_has_its_own_master_and_both_slaves_of_a_sync_master_replicate(
        tmp_path, namesrv, connect, admin):
    mx = master(tmp_path, namesrv, "broker-x", "SYNC_MASTER", sub="x0")
    my = master(tmp_path, namesrv, "broker-y", "ASYNC_MASTER", sub="y0")
    sx1 = slave(tmp_path, namesrv, "broker-x", 1, sub="x1")
    sx2 = slave(tmp_path, namesrv, "broker-x", 2, sub="x2")
    sy1 = slave(tmp_path, namesrv, "broker-y", 1, sub="y1")
    clients = {b: connect(b.addr) for b in (sy1, sx2, sx1, my, mx)}
    cx, cy = clients[mx], clients[my]
    roles = {b.name + f"/{b.broker_id}": (await ha(c)).role for b, c in clients.items()}
    assert roles == {"broker-x/0": "SYNC_MASTER", "broker-y/0": "ASYNC_MASTER", "broker-x/1": "SLAVE",
                     "broker-x/2": "SLAVE", "broker-y/1": "SLAVE"}
    await wait_slaves_ok(cx, (1, 2))
    await wait_slaves_ok(cy, (1,))
    # a slave belongs to the master of its own brokerName only
    assert sorted(s.broker_id for s in (await ha(cx)).slaves) == [1, 2]
    assert [s.broker_id for s in (await ha(cy)).slaves] == [1]
    info = await admin.cluster_info()
    table = {name: dict(bd.broker_addrs) for name, bd in info.broker_addr_table.items()}
    assert table == {"broker-x": {0: mx.addr, 1: sx1.addr, 2: sx2.addr}, "broker-y": {0: my.addr, 1: sy1.addr}}

    assert (await cx.create_topic("TX", 2)).code == 0
    assert (await cy.create_topic("TY", 2)).code == 0
    for i in range(20):
        resp = await cx.send("TX", i % 2, [message(f"x-{i}".encode(), UNIQ_KEY=f"x-{i}")])
        assert resp.code == SEND_OK, resp.remark
        resp = await cy.send("TY", i % 2, [message(f"y-{i}".encode(), UNIQ_KEY=f"y-{i}")])
        assert resp.code == SEND_OK, resp.remark
    end_x = await wait_caught_up(cx, clients[sx1])
    assert await wait_caught_up(cx, clients[sx2]) == end_x
    await wait_caught_up(cy, clients[sy1])
    for s in (sx1, sx2):
        await wait_slave_knows_topic(clients[s], "TX")
        got = await clients[s].pull_all("g-x", "TX", 0) + await clients[s].pull_all("g-x", "TX", 1)
        assert sorted(m.body for m in got) == sorted(f"x-{i}".encode() for i in range(20))
    await wait_slave_knows_topic(clients[sy1], "TY")
    got = await clients[sy1].pull_all("g-y", "TY", 0) + await clients[sy1].pull_all("g-y", "TY", 1)
    assert sorted(m.body for m in got) == sorted(f"y-{i}".encode() for i in range(20))
    assert (await clients[sy1].pull("g-y", "TX", 0, 0)).code != SEND_OK  # nothing of broker-x on y's slave


async def test_a_learning_slave_follows_a_master_that_moved_its_ha_port_and_a_configured_one_does_not(
        tmp_path, namesrv, connect):
    m = master(tmp_path, namesrv, "broker-f", "ASYNC_MASTER")
    # registration period 10 s (the clamp's lower bound): the learning slave hears of a move within ~10 s
    learning = slave(tmp_path, namesrv, "broker-f", 1, sub="s1", registerNameServerPeriod=10_000)
    configured = slave(tmp_path, namesrv, "broker-f", 2, sub="s2", registerNameServerPeriod=10_000,
                       haMasterAddress=f"localhost:{m.ha_port}")
    mc, lc, cc = connect(m.addr), connect(learning.addr), connect(configured.addr)
    await wait_slaves_ok(mc, (1, 2))
    # each slave uses its own source: the reply's brokerIP:haListenPort, or haMasterAddress verbatim
    assert (await ha(lc)).master_ha_addr == m.ha_addr
    assert (await ha(cc)).master_ha_addr == f"localhost:{m.ha_port}"
    assert (await mc.create_topic("TF", 1)).code == 0
    assert (await mc.send("TF", 0, [message(b"before-move")])).code == SEND_OK
    await wait_caught_up(mc, lc)
    await wait_caught_up(mc, cc)

    # the master comes back at the same broker address but on another HA port
    m.stop()
    await mc.close()
    new_ha_port = free_port()
    m2 = master(tmp_path, namesrv, "broker-f", "ASYNC_MASTER", listenPort=m.port, haListenPort=new_ha_port)
    mc = connect(m2.addr)
    assert (await mc.send("TF", 0, [message(b"after-move")])).code == SEND_OK

    async def followed() -> bool:
        st = await ha(lc)
        return st.master_ha_addr == m2.ha_addr and st.connected

    await async_wait_until(followed, 30, f"the learning slave to reconnect to the new HA address {m2.ha_addr} "
                                         "from a registration reply", 0.2)
    await wait_caught_up(mc, lc)
    got = await lc.pull_all("g-f", "TF", 0)
    assert [x.body for x in got] == [b"before-move", b"after-move"]
    # haMasterAddress is used forever (spec §2.7): the configured slave kept the old port and is not connected
    st = await ha(cc)
    assert st.master_ha_addr == f"localhost:{m.ha_port}" and not st.connected
    assert [s.broker_id for s in (await ha(mc)).slaves if s.state == "OK"] == [1]


async def test_a_slave_started_before_its_master_starts_replicating_well_before_the_registration_period(
    tmp_path, namesrv, connect
):
    """RocketMQ's slave waits a whole registration period (>= 10 s, 30 s by default) to learn a master that
    started after it; here it asks again after 1 s, 2 s, 4 s... while the reply names no master."""
    s = slave(tmp_path, namesrv, "broker-late", 1, sub="late-s")
    m = master(tmp_path, namesrv, "broker-late", "SYNC_MASTER", sub="late-m")
    mc, sc = connect(m.addr), connect(s.addr)
    await wait_slaves_ok(mc, timeout_s=8)  # well under the 10 s minimum period
    result = await mc.send("LateTopic", 0, [message(b"first")])
    assert result.code == SEND_OK, result.remark
    assert (await ha(sc)).connected
