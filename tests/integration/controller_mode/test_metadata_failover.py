"""Issue 23, "Metadata is on the new master": a topic, subscription group and consumer offset the master accepted
are on its slave at once (the master pushes NOTIFY_METADATA_CHANGED, broker/slave_notify.py), so the member the
controller elects after a SIGKILL of the master has them and takes writes to the topic. The slaves' periodic
metadata round is set 10 minutes apart here: only the push can have brought them."""

from __future__ import annotations

import pytest

from client import Message, Producer, SendStatus
from harness.controller_mode import controller_broker, replica_info, sync_state_set_is
from harness.waiting import async_wait_until
from remoting.codes import RequestCode
from tests.integration.broker.rpc import BrokerClient, group_config, message

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

GROUP = "broker-meta"
NO_ROUND = {"slaveSynchronizeInterval": 600_000}


async def _knows_topic(client: BrokerClient, topic: str) -> bool:
    return topic in await client.topic_configs()


async def test_a_topic_group_and_offset_created_just_before_the_master_is_killed_are_on_the_new_master(
        tmp_path, cns):
    brokers = [controller_broker(tmp_path, cns, GROUP, i, **NO_ROUND) for i in (1, 2)]
    clients: list[BrokerClient] = []
    producer = await Producer("meta-failover", cns.addr, send_timeout_s=8.0).start()
    try:
        first = brokers[0].start()
        assert (await replica_info(cns, GROUP)).master_address == first.addr
        second = brokers[1].start()
        await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2}), 30, "both brokers in the SyncStateSet")
        mc, sc = BrokerClient(first.addr), BrokerClient(second.addr)
        clients += [mc, sc]
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
        first.kill()

        async def second_is_master() -> bool:
            info = await replica_info(cns, GROUP)
            return info.master_address == second.addr and info.sync_state_set == {2}

        await async_wait_until(second_is_master, 30, "the slave elected master", 0.05)
        await sc.close()
        sc = BrokerClient(second.addr)  # its server restarted in the new role
        clients.append(sc)

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
