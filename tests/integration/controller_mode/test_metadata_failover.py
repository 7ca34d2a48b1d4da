"""Issue 23, "Metadata is on the new master": a topic, subscription group and consumer offset the master accepted
are on its slave at once (the master pushes NOTIFY_METADATA_CHANGED, broker/slave_notify.py), so the member the
controller elects after a SIGKILL of the master has them and takes writes to the topic. The slaves' periodic
metadata round is set 10 minutes apart here: only the push can have brought them."""

from __future__ import annotations

import pytest

from client import Message, Producer, SendStatus
from harness.controller_mode import controller_broker, replica_info, sync_state_set_is
from harness.procs import Broker
from harness.waiting import async_wait_until
from remoting.codes import RequestCode
from tests.integration.broker.rpc import BrokerClient, group_config, message
from tests.integration.replication.helpers import delayed_and_pushed

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

GROUP = "broker-meta"
NO_ROUND = {"slaveSynchronizeInterval": 600_000}


async def _knows_topic(client: BrokerClient, topic: str) -> bool:
    return topic in await client.topic_configs()


async def _started(cns, brokers: list[Broker], clients: list[BrokerClient]) -> tuple[BrokerClient, BrokerClient]:
    """Start ``brokers`` (the first becomes master) until both are in the SyncStateSet; a client of each."""
    first, second = brokers
    first.start()
    assert (await replica_info(cns, GROUP)).master_address == first.addr
    second.start()
    await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2}), 30, "both brokers in the SyncStateSet")
    clients += [BrokerClient(first.addr), BrokerClient(second.addr)]
    return clients[-2], clients[-1]


async def _killed_and_replaced(cns, brokers: list[Broker], clients: list[BrokerClient],
                               sc: BrokerClient) -> BrokerClient:
    """SIGKILL the master; once the controller elected the slave, a new client of it (its server restarts)."""
    first, second = brokers
    first.kill()

    async def second_is_master() -> bool:
        info = await replica_info(cns, GROUP)
        return info.master_address == second.addr and info.sync_state_set == {2}

    await async_wait_until(second_is_master, 30, "the slave elected master", 0.05)
    await sc.close()
    clients.append(BrokerClient(second.addr))  # its server restarted in the new role
    return clients[-1]


async def test_a_topic_group_and_offset_created_just_before_the_master_is_killed_are_on_the_new_master(
        tmp_path, cns):
    brokers = [controller_broker(tmp_path, cns, GROUP, i, **NO_ROUND) for i in (1, 2)]
    clients: list[BrokerClient] = []
    producer = await Producer("meta-failover", cns.addr, send_timeout_s=8.0).start()
    try:
        mc, sc = await _started(cns, brokers, clients)
        # the slave subscribed on its first round (run when it learned its master)
        assert (await mc.create_topic("TWarm", 1)).code == 0
        await async_wait_until(lambda: _knows_topic(sc, "TWarm"), 20, "TWarm on the slave", 0.05)

        created = await mc.create_topic("TJustBefore", 2)
        assert created.code == 0 and "held by 1 slave(s)" in created.remark, created.remark
        grouped = await mc.create_group(group_config("GJustBefore"))
        assert grouped.code == 0 and "held by 1 slave(s)" in grouped.remark, grouped.remark
        assert (await mc.send("TJustBefore", 0, [message(b"%d" % i) for i in range(5)])).code == 0
        assert (await mc.commit_offset("GJustBefore", "TJustBefore", 0, 3)).code == 0

        async def offset_on_slave() -> bool:
            return await sc.query_offset("GJustBefore", "TJustBefore", 0) == (0, 3)

        await async_wait_until(offset_on_slave, 5, "offset 3 pushed to the slave", 0.02)
        sc = await _killed_and_replaced(cns, brokers, clients, sc)

        async def serves_as_master() -> bool:
            try:  # admin writes are refused (NO_PERMISSION) until its server restarted as master
                return (await sc.create_group(group_config("GProbe"))).code == 0
            except Exception:  # noqa: BLE001 - the role switch restarts its server
                return False

        await async_wait_until(serves_as_master, 30, "the new master serving as master", 0.05)
        assert await _knows_topic(sc, "TJustBefore")
        assert await sc.query_offset("GJustBefore", "TJustBefore", 0) == (0, 3)
        groups = await sc.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert b"GJustBefore" in groups.body_bytes()

        async def writable() -> bool:
            try:
                return (await producer.send(Message("TJustBefore", b"after"))).status is SendStatus.SEND_OK
            except Exception:  # noqa: BLE001 - the route still names the dead master
                return False

        await async_wait_until(writable, 30, "a SEND_OK for TJustBefore from the new master", 0.1)
    finally:
        await producer.stop()
        for c in clients:
            await c.close()
        for b in brokers:
            b.stop()


async def test_no_scheduled_message_is_delivered_twice_after_the_master_is_killed(tmp_path, cns):
    """The delay levels' progress is pushed with the other offsets: the member the controller elects resumes each
    level where the dead master stopped, not where the last metadata round (10 minutes here) left it."""
    brokers = [controller_broker(tmp_path, cns, GROUP, i, **NO_ROUND) for i in (1, 2)]
    clients: list[BrokerClient] = []
    try:
        mc, sc = await _started(cns, brokers, clients)
        assert (await mc.create_topic("TDelayed", 1)).code == 0
        await async_wait_until(lambda: _knows_topic(sc, "TDelayed"), 20, "TDelayed on the slave", 0.05)
        await delayed_and_pushed(mc, sc, "TDelayed")
        sc = await _killed_and_replaced(cns, brokers, clients, sc)

        async def marker_sent() -> bool:
            try:  # refused until its server restarted as master
                return (await sc.send("TDelayed", 0, [message(b"marker", DELAY="1")])).code == 0
            except Exception:  # noqa: BLE001 - the role switch restarts its server
                return False

        await async_wait_until(marker_sent, 30, "a delayed marker taken by the new master", 0.05)

        async def marker_delivered() -> list[bytes] | None:
            bodies = [m.body for m in await sc.pull_all("g-once", "TDelayed", 0)]
            return bodies if b"marker" in bodies else None

        # the level delivers in queue order: a re-delivery of the first 8 would come before the marker
        bodies = await async_wait_until(marker_delivered, 30, "the marker delivered by the new master", 0.05)
        assert bodies[:bodies.index(b"marker")] == [b"%d" % i for i in range(8)], bodies
    finally:
        for c in clients:
            await c.close()
        for b in brokers:
            b.stop()
