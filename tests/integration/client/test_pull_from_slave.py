"""PullConsumer with a master and its slave: it follows suggestWhichBrokerId, and when the master is down it pulls
from the slave and commits offsets there (spec §5.4, §6.2)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from client import Message, MessageQueue, Producer, PullConsumer, PullStatus
from tests.brokers import master_and_slave
from tests.integration.client.conftest import Recorder, create_topic, push_consumer, unique, wait_for
from harness.procs import Broker

pytestmark = pytest.mark.integration

FAST_FAILOVER = {"persist_interval_s": 0.5, "pull_retry_delay_s": 0.5}  # commits and retries soon after the kill


@pytest.fixture
def group_pair(tmp_path, namesrv):
    with master_and_slave(tmp_path, namesrv.addr, "broker-s", slaveReadEnable=True) as pair:
        yield pair


class Replicated(NamedTuple):
    master: Broker
    slave: Broker
    topic: str
    mq: MessageQueue


@pytest.fixture
async def replicated(namesrv, admin, group_pair) -> Replicated:
    """The group with a one-queue topic of 20 messages, s-0 to s-19, that the slave holds, knows and is routed
    for."""
    master, slave = group_pair
    topic, n = unique("T_slave"), 20
    await create_topic(admin, master, topic, queues=1)
    async with Producer(unique("P"), namesrv.addr) as producer:
        for i in range(n):
            await producer.send(Message(topic, f"s-{i}".encode()))

    async def slave_has_all() -> bool:
        return (await admin.queue_offsets(slave.addr, topic, 0)).max_offset >= n

    async def slave_routed() -> bool:
        return 1 in (await admin.topic_route(topic)).broker_addrs.get("broker-s", {})

    async def slave_knows_topic() -> bool:  # metadata sync: every 10 s, first after 3 s (spec §4)
        configs = (await admin.all_topic_configs(slave.addr)).topic_configs
        return any(c.topic_name == topic for c in configs)

    await wait_for(slave_has_all, 30, f"the slave to replicate {n} messages of {topic}", interval_s=0.2)
    await wait_for(slave_knows_topic, 30, f"the slave to sync the config of {topic}", interval_s=0.5)
    await wait_for(slave_routed, 40, "the slave in the topic's route", interval_s=0.5)
    return Replicated(master, slave, topic, MessageQueue(topic, "broker-s", 0))


async def test_pull_consumer_follows_the_brokers_read_advice_to_the_slave(namesrv, admin, replicated):
    master, slave, _, mq = replicated
    group = unique("G_advice")
    # The group reads from broker 1 when not lagging (slaveReadEnable=true on the master).
    await admin.update_subscription_group(master.addr, group, broker_id=1)
    async with PullConsumer(group, namesrv.addr) as puller:
        first = await puller.pull(mq, 0, max_nums=5)
        assert first.broker_addr == master.addr and first.suggest_which_broker_id == 1
        second = await puller.pull(mq, first.next_begin_offset, max_nums=5)
    assert second.broker_addr == slave.addr and second.from_slave
    assert second.status is PullStatus.FOUND
    assert [m.body for m in first.messages + second.messages] == [f"s-{i}".encode() for i in range(10)]


async def test_with_the_master_down_pulls_and_offset_commits_go_to_the_slave(namesrv, admin, replicated):
    master, slave, topic, mq = replicated
    group = unique("G_failover")
    async with PullConsumer(group, namesrv.addr) as puller:
        before = await puller.pull(mq, 0, max_nums=10)
        assert before.broker_addr == master.addr
        await puller.commit_offset(mq, before.next_begin_offset)
        master.kill()
        after = await puller.pull(mq, before.next_begin_offset, max_nums=10, timeout_s=5.0)
        assert after.broker_addr == slave.addr
        assert [m.body for m in after.messages] == [f"s-{i}".encode() for i in range(10, 20)]
        stored_at = await puller.commit_offset(mq, after.next_begin_offset)
        assert stored_at == slave.addr
        assert await puller.query_offset(mq) == 20
    assert await admin.query_consumer_offset(slave.addr, group, topic, 0) == 20


async def test_an_offset_the_master_took_before_it_died_is_committed_again_to_the_slave(namesrv, admin, replicated):
    # The slave copies offsets from its master every few seconds: what the master took last may never reach it.
    master, slave, topic, mq = replicated
    group = unique("G_recommit")
    async with PullConsumer(group, namesrv.addr) as puller:
        got = await puller.pull(mq, 0, max_nums=10)
        assert await puller.commit_offset(mq, got.next_begin_offset) == master.addr
        assert await puller.offsets.persist_all() == 0  # the node it would go to has it already
        master.kill()
        after = await puller.pull(mq, got.next_begin_offset, max_nums=1, timeout_s=5.0)  # finds the master down
        assert after.broker_addr == slave.addr
        assert await puller.offsets.persist_all() == 1
        assert await puller.offsets.persist_all() == 0
    assert await admin.query_consumer_offset(slave.addr, group, topic, 0) == got.next_begin_offset


async def test_a_push_consumer_consumes_from_the_slave_while_the_master_is_down(namesrv, admin, replicated):
    master, slave, topic, mq = replicated
    group = unique("G_push_failover")
    master.kill()
    rec = Recorder()
    async with push_consumer(namesrv, group, topic, rec, **FAST_FAILOVER):
        await wait_for(lambda: rec.unique_count() >= 20, 30, "the 20 replicated messages, read from the slave")
    assert sorted(rec.bodies) == sorted(f"s-{i}".encode() for i in range(20))
    assert await admin.query_consumer_offset(slave.addr, group, topic, mq.queue_id) == 20


async def test_a_push_consumer_rides_out_a_master_restart_and_commits_to_the_master_again(namesrv, admin, replicated):
    master, slave, topic, _ = replicated
    group = unique("G_push_return")
    rec = Recorder()
    async with push_consumer(namesrv, group, topic, rec, pull_timeout_s=3.0, **FAST_FAILOVER):
        await wait_for(lambda: rec.unique_count() >= 20, 20, "the first 20 messages")
        master.kill()
        async def slave_offset_is_current() -> bool:  # synced from the master, or committed again by the consumer
            return await admin.query_consumer_offset(slave.addr, group, topic, 0) == 20

        await wait_for(slave_offset_is_current, 20, "the group's offset 20 on the slave while the master is down",
                       interval_s=0.2)
        master.start()
        async with Producer(unique("P"), namesrv.addr, send_timeout_s=5.0) as producer:

            await wait_for(lambda: producer.send(Message(topic, b"s-20")), 30, "the restarted master to take writes",
                           interval_s=0.5)
            for i in range(21, 40):
                await producer.send(Message(topic, f"s-{i}".encode()))
        await wait_for(lambda: rec.unique_count() >= 40, 30, "the 20 messages sent after the restart")

        async def master_offset_is_current() -> bool:
            return await admin.query_consumer_offset(master.addr, group, topic, 0) == 40

        await wait_for(master_offset_is_current, 20, "commits to reach the master again", interval_s=0.3)
    assert sorted(rec.bodies) == sorted(f"s-{i}".encode() for i in range(40))
