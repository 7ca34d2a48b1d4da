"""Read advice between real processes (DESIGN §4, spec §5.1-§5.4).

accessMessageInMemoryMaxRatio=0 makes any backlog count as "consume slowly" (spec §5.1: the flag is
``maxOffsetPy - maxPhyOffsetPulling > RAM * ratio / 100``). The group-brokerId path (not lagging, brokerId=1) is
in tests/integration/client/test_pull_from_slave.py.
"""

from __future__ import annotations

import pytest

from client import AdminClient, MessageQueue, PullConsumer, PullStatus
from remoting.codes import RequestCode
from remoting.message_codec import iter_records
from tests.integration.broker.rpc import message
from tests.integration.replication.helpers import SEND_OK, wait_caught_up, wait_slaves_ok
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]


async def _setup(pair, admin: AdminClient, name: str, group: str, *, slave_read_on_slave: bool, ratio: int,
                 broker_id: int, n: int):
    m, s, mc, sc = pair(name, "SYNC_MASTER",
                        master_conf={"slaveReadEnable": True, "accessMessageInMemoryMaxRatio": ratio},
                        slave_conf={"slaveReadEnable": slave_read_on_slave, "accessMessageInMemoryMaxRatio": ratio,
                                    "registerNameServerPeriod": 10_000})
    await admin.update_topic(m.addr, "TR", read_queue_nums=1, write_queue_nums=1)
    await admin.update_subscription_group(m.addr, group, broker_id=broker_id, which_broker_when_consume_slowly=1)
    await wait_slaves_ok(mc)
    for i in range(n):
        assert (await mc.send("TR", 0, [message(f"r-{i}".encode())])).code == SEND_OK

    async def slave_ready() -> bool:  # data, topic, group synced and the slave in the topic's route
        groups = {g.group_name: g for g in (await admin.all_subscription_groups(s.addr)).groups}
        route = await admin.topic_route("TR")
        return (group in groups and groups[group].broker_id == broker_id
                and any(t.topic_name == "TR" for t in (await admin.all_topic_configs(s.addr)).topic_configs)
                and 1 in route.broker_addrs.get(name, {}))

    await wait_caught_up(mc, sc)
    await async_wait_until(slave_ready, 40, "topic, group and route of the slave ready", 0.3)
    return m, s, mc, sc


async def test_a_lagging_consumer_is_advised_to_the_slave_and_back_to_the_master_once_caught_up(namesrv, pair, admin):
    m, s, mc, sc = await _setup(pair, admin, "broker-rs", "GSlow", slave_read_on_slave=True, ratio=0, broker_id=0,
                                n=30)
    mq = MessageQueue("TR", "broker-rs", 0)
    async with PullConsumer("GSlow", namesrv.addr) as puller:
        offset, served, bodies, offsets = 0, [], [], []
        for _ in range(40):
            got = await puller.pull(mq, offset, max_nums=4)
            served.append((got.broker_addr, got.status, got.suggest_which_broker_id))
            bodies += [x.body for x in got.messages]
            offsets += [x.queue_offset for x in got.messages]
            if got.status is PullStatus.NO_NEW_MSG:
                break
            offset = got.next_begin_offset
        # caught up: a pull finding nothing is not "slow", so the slave sends the consumer back (brokerId 0)
        back = await puller.pull(mq, offset, max_nums=4)
        # new messages: the master serves them and, with a backlog again, advises the slave
        for i in range(30, 40):
            assert (await mc.send("TR", 0, [message(f"r-{i}".encode())])).code == SEND_OK
        again = await puller.pull(mq, offset, max_nums=4)
    assert served[0] == (m.addr, PullStatus.FOUND, 1), served[0]
    assert all(addr == s.addr for addr, _, _ in served[1:]), served
    assert all(sug == 1 for _, st, sug in served[:-1]), served
    assert served[-1] == (s.addr, PullStatus.NO_NEW_MSG, 0), served[-1]
    assert back.broker_addr == m.addr and back.status is PullStatus.NO_NEW_MSG
    assert again.broker_addr == m.addr and again.status is PullStatus.FOUND and again.suggest_which_broker_id == 1
    assert bodies == [f"r-{i}".encode() for i in range(30)] and offsets == list(range(30))
    assert again.messages[0].queue_offset == 30


async def test_a_slave_with_slave_read_disabled_points_consumers_back_to_the_master(namesrv, pair, admin):
    m, s, mc, sc = await _setup(pair, admin, "broker-rd", "GRead1", slave_read_on_slave=False, ratio=40, broker_id=1,
                                n=12)
    mq = MessageQueue("TR", "broker-rd", 0)
    # the raw answer: the slave still returns the messages (4.x quirk, spec §5.2 step 2) but suggests 0
    direct = await sc.pull("GRead1", "TR", 0, 0, 4)
    assert direct.code == 0 and direct.suggest_which_broker_id == 0
    async with PullConsumer("GRead1", namesrv.addr) as puller:
        first = await puller.pull(mq, 0, max_nums=4)  # the master (slaveReadEnable=true) advises the group's 1
        second = await puller.pull(mq, first.next_begin_offset, max_nums=4)
        third = await puller.pull(mq, second.next_begin_offset, max_nums=4)
    assert (first.broker_addr, first.suggest_which_broker_id) == (m.addr, 1)
    assert (second.broker_addr, second.suggest_which_broker_id) == (s.addr, 0)
    assert third.broker_addr == m.addr
    got = first.messages + second.messages + third.messages
    assert [x.queue_offset for x in got] == list(range(12))
    assert [x.body for x in got] == [f"r-{i}".encode() for i in range(12)]


async def test_the_slave_builds_its_own_index_and_answers_queries_by_key_and_uniq_key(pair):
    m, s, mc, sc = pair("broker-idx", "ASYNC_MASTER")
    await mc.create_topic("IdxTopic", queues=1)
    sent = [await mc.send("IdxTopic", 0, [message(f"m{i}".encode(), KEYS=f"k{i % 3}", UNIQ_KEY=f"{i:032X}")])
            for i in range(30)]
    assert all(r.code == 0 for r in sent)
    await wait_caught_up(mc, sc)

    async def query(key: str, unique: bool = False):
        ext = {"topic": "IdxTopic", "key": key, "maxNum": "64", "beginTimestamp": "0",
               "endTimestamp": str(2**63 - 1), "_UNIQUE_KEY_QUERY": str(unique).lower()}
        return await sc.request(RequestCode.QUERY_MESSAGE, ext)

    async def slave_indexed() -> bool:
        resp = await query("k0")
        return int(resp.ext.get("indexLastUpdatePhyoffset", -1)) >= sent[-1].physical_offset

    await async_wait_until(slave_indexed, 20, "the slave's index to reach the last replicated message")
    k1 = await query("k1")
    assert [msg.body for msg in iter_records(k1.body_bytes())] == [f"m{i}".encode() for i in range(28, 0, -3)]
    one = await query(f"{17:032X}", unique=True)
    assert [msg.body for msg in iter_records(one.body_bytes())] == [b"m17"]
