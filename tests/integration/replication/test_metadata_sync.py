"""Metadata sync between real processes (DESIGN §4, spec §4 and §6.4, reliability.md O1-O2).

slaveSynchronizeInterval=1000 (first round after 3 s). The in-process versions: tests/unit/ha/test_slave_sync.py.
"""

from __future__ import annotations

import json
import time

import pytest

from client import AdminClient
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from tests.integration.broker.test_metadata_storm import metric, pull_storm
from tests.integration.broker.rpc import BrokerClient, group_config, message
from tests.integration.replication.helpers import delayed_and_pushed, master, slave, wait_sync_rounds
from harness.procs import Broker
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]


async def _topic(admin: AdminClient, addr: str, name: str):
    return next((t for t in (await admin.all_topic_configs(addr)).topic_configs if t.topic_name == name), None)


async def _group(admin: AdminClient, addr: str, name: str):
    return next((g for g in (await admin.all_subscription_groups(addr)).groups if g.group_name == name), None)


async def _wait_slave_meta(admin: AdminClient, slave: Broker, queues: int | None,
                           group: tuple[int, int] | None) -> None:
    """Until the slave holds TMeta with ``queues`` read queues and GMeta with ``group`` = (brokerId,
    retryMaxTimes), None for one it must not hold."""

    async def holds() -> bool:
        t, g = await _topic(admin, slave.addr, "TMeta"), await _group(admin, slave.addr, "GMeta")
        got = (None if t is None else t.read_queue_nums, None if g is None else (g.broker_id, g.retry_max_times))
        return got == (queues, group)

    await async_wait_until(holds, 20, f"TMeta with {queues} queues, GMeta (brokerId, retryMaxTimes) {group} on the "
                           "slave", 0.2)


async def test_topics_and_groups_created_changed_and_deleted_on_the_master_follow_on_the_slave(
        tmp_path, namesrv, admin):
    m = master(tmp_path, namesrv, "broker-md", "ASYNC_MASTER")
    s = slave(tmp_path, namesrv, "broker-md", haMasterAddress=m.ha_addr)
    await admin.update_topic(m.addr, "TMeta", read_queue_nums=3, write_queue_nums=3)
    await admin.update_subscription_group(m.addr, "GMeta", broker_id=1, retry_max_times=5)
    await _wait_slave_meta(admin, s, 3, (1, 5))
    # the slave took the master's tables with their DataVersions (a later round compares them, RocketMQ's rule)
    for read in (admin.all_topic_configs, admin.all_subscription_groups):
        on_m, on_s = await read(m.addr), await read(s.addr)
        assert on_s.data_version == on_m.data_version and on_m.data_version.counter > 0

    await admin.update_topic(m.addr, "TMeta", read_queue_nums=5, write_queue_nums=5)
    await admin.update_subscription_group(m.addr, "GMeta", broker_id=0, retry_max_times=7)
    await _wait_slave_meta(admin, s, 5, (0, 7))

    await admin.delete_topic(m.addr, "TMeta")
    await admin.delete_subscription_group(m.addr, "GMeta")
    await _wait_slave_meta(admin, s, None, None)


async def test_consumer_offsets_reach_the_slave_and_never_move_back_there(pair):
    m, s, mc, sc = pair("broker-mo", "ASYNC_MASTER")
    assert (await mc.create_topic("TOff", 2)).code == 0
    await _messages_on_both(mc, sc, "GOff", "TOff", {0: 12, 1: 3})  # a commit is at most the queue's max
    assert (await mc.commit_offset("GOff", "TOff", 0, 5)).code == 0
    assert (await mc.commit_offset("GOff", "TOff", 1, 3)).code == 0

    await async_wait_until(lambda: _offset(sc, "GOff", "TOff", 0, 5), 20, "offset 5 of queue 0 on the slave", 0.2)
    await async_wait_until(lambda: _offset(sc, "GOff", "TOff", 1, 3), 20, "offset 3 of queue 1 on the slave", 0.2)

    # a consumer committed further on the slave (master unreachable for it): later rounds do not roll it back
    assert (await sc.commit_offset("GOff", "TOff", 0, 9)).code == 0
    await wait_sync_rounds(s, 2)  # two whole rounds with the master still at 5
    assert await sc.query_offset("GOff", "TOff", 0) == (0, 9)
    assert await mc.query_offset("GOff", "TOff", 0) == (0, 5)  # the slave never writes to a running master

    # the master moves past the slave: the larger value wins again
    assert (await mc.commit_offset("GOff", "TOff", 0, 12)).code == 0
    await async_wait_until(lambda: _offset(sc, "GOff", "TOff", 0, 12), 20, "offset 12 of queue 0 on the slave", 0.2)
    assert await sc.query_offset("GOff", "TOff", 1) == (0, 3)


async def test_a_master_that_restarts_takes_the_offsets_its_slave_accepted_while_it_was_down(connect, pair):
    m, s, mc, sc = pair("broker-mr", "ASYNC_MASTER")
    assert (await mc.create_topic("TRe", 2)).code == 0
    await _messages_on_both(mc, sc, "GRe", "TRe", {0: 20, 1: 7})
    assert (await mc.commit_offset("GRe", "TRe", 0, 4)).code == 0
    await async_wait_until(lambda: _offset(sc, "GRe", "TRe", 0, 4), 20, "offset 4 on the slave", 0.2)
    await async_wait_until(lambda: _persisted_offset(m, "TRe@GRe", 0) == 4, 20,
                           "the master's consumerOffset.json to hold 4 before the crash (flushed every 5 s)", 0.2)

    m.kill()
    # while the master is down, consumers commit to the slave
    assert (await sc.commit_offset("GRe", "TRe", 0, 20)).code == 0
    assert (await sc.commit_offset("GRe", "TRe", 1, 7)).code == 0

    m.start(30)
    mc = connect(m.addr)
    # from its first answer on, the master has the slave's offsets (pulled before it registered)
    assert await mc.query_offset("GRe", "TRe", 0) == (0, 20)
    assert await mc.query_offset("GRe", "TRe", 1) == (0, 7)
    await wait_sync_rounds(s, 2, 40)  # rounds from the returned master do not roll the slave back
    assert await sc.query_offset("GRe", "TRe", 0) == (0, 20)
    assert await sc.query_offset("GRe", "TRe", 1) == (0, 7)


async def _messages_on_both(mc: BrokerClient, sc: BrokerClient, group: str, topic: str, counts: dict[int, int]):
    """``counts[q]`` messages in each queue and ``group`` known, on the master and (replicated, synced) the slave:
    a broker takes a commit only for a group and topic it knows and up to the queue's max offset."""
    assert (await mc.create_group(group_config(group))).code == 0
    for q, n in counts.items():
        assert (await mc.send(topic, q, [message(b"%d" % i) for i in range(n)])).code == 0

    async def on_slave() -> bool:
        for q, n in counts.items():
            got = await sc.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
            if got.code != 0 or int(got.ext["offset"]) < n:
                return False
        return (await sc.commit_offset(group, topic, 0, 0)).code == 0  # the group reached the slave too

    await async_wait_until(on_slave, 20, f"{counts} messages of {topic} and group {group} on the slave", 0.2)


async def _offset(client: BrokerClient, group: str, topic: str, q: int, want: int) -> bool:
    return await client.query_offset(group, topic, q) == (0, want)


def _persisted_offset(broker: Broker, key: str, queue_id: int) -> int | None:
    """The offset a broker's consumerOffset.json holds (what survives a SIGKILL)."""
    path = broker.store_dir / "config" / "consumerOffset.json"
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("offsetTable", {}).get(key, {}).get(str(queue_id))


async def test_topics_groups_and_offsets_reach_the_slave_by_push_not_by_the_periodic_round(pair):
    """The slave's periodic round is 10 minutes away: only the master's NOTIFY_METADATA_CHANGED can bring them."""
    m, s, mc, sc = pair("broker-push", "SYNC_MASTER", slave_conf={"slaveSynchronizeInterval": 600_000})
    assert (await mc.create_topic("TPush0", 1)).code == 0
    # the slave's first round runs when it learns its master (registration), and subscribes
    await async_wait_until(lambda: _knows_topic(sc, "TPush0"), 20, "TPush0 on the slave after its first round", 0.05)

    created = await mc.create_topic("TPush", 2)
    assert created.code == 0 and "held by 1 slave(s)" in created.remark, created.remark
    assert await _knows_topic(sc, "TPush")  # updateTopic answered once the slave held it
    grouped = await mc.create_group(group_config("GPush"))
    assert grouped.code == 0 and "held by 1 slave(s)" in grouped.remark, grouped.remark
    assert (await sc.commit_offset("GPush", "TPush", 0, 0)).code == 0  # the slave knows the group

    assert (await mc.send("TPush", 0, [message(b"%d" % i) for i in range(6)])).code == 0  # SYNC: on the slave too
    assert (await mc.commit_offset("GPush", "TPush", 0, 4)).code == 0
    await async_wait_until(lambda: _offset(sc, "GPush", "TPush", 0, 4), 5, "offset 4 pushed to the slave", 0.02)
    assert (await mc.commit_offset("GPush", "TPush", 0, 6)).code == 0
    await async_wait_until(lambda: _offset(sc, "GPush", "TPush", 0, 6), 5, "offset 6 pushed to the slave", 0.02)

    deleted = await mc.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TPush0"})
    assert deleted.code == 0, deleted.remark
    await async_wait_until(lambda: _gone(sc, "TPush0"), 5, "TPush0 deleted on the slave too", 0.02)


async def _knows_topic(client: BrokerClient, topic: str) -> bool:
    return topic in await client.topic_configs()


async def _gone(client: BrokerClient, topic: str) -> bool:
    return not await _knows_topic(client, topic)


async def test_a_storm_of_new_groups_reaches_the_slave_in_coalesced_pulls(pair):
    """5,000 pulls naming new groups: the slave gets them all, pulling the group table at most once per 50 ms
    (the master's notification interval), not once per group."""
    m, s, mc, sc = pair("broker-storm", "ASYNC_MASTER", slave_conf={"slaveSynchronizeInterval": 600_000})
    assert (await mc.create_topic("TStorm", 1)).code == 0
    await async_wait_until(lambda: _knows_topic(sc, "TStorm"), 20, "TStorm on the slave (first round)", 0.05)
    runs_before = _group_pulls(s)

    groups = [f"storm-{i}" for i in range(5000)]
    started = time.monotonic()
    replies = await pull_storm(mc, groups, "TStorm")
    assert all(r.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST for r in replies)

    async def all_on_slave() -> bool:
        resp = await sc.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        table = fastjson.loads(resp.body_bytes())["subscriptionGroupTable"]
        return all(g in table for g in groups)

    await async_wait_until(all_on_slave, 30, "the 5,000 groups on the slave", 0.1)
    elapsed = time.monotonic() - started
    pulls = _group_pulls(s) - runs_before
    assert 1 <= pulls <= elapsed / 0.05 + 2, (pulls, elapsed)


def _group_pulls(broker: Broker) -> float:
    return metric(broker, "rocketmq_slave_sync_runs_total", step="subscription_groups", outcome="success") or 0.0



async def test_delay_offsets_reach_the_slave_by_push_within_a_second_of_the_delivery(pair):
    """The slave's round is 10 minutes away: the level's progress the master's schedule service made (what a promoted
    slave resumes from) can reach it only by NOTIFY_METADATA_CHANGED."""
    m, s, mc, sc = pair("broker-dpush", "SYNC_MASTER", slave_conf={"slaveSynchronizeInterval": 600_000})
    assert (await mc.create_topic("TDelay", 1)).code == 0
    await async_wait_until(lambda: _knows_topic(sc, "TDelay"), 20, "TDelay on the slave after its first round", 0.05)
    await delayed_and_pushed(mc, sc, "TDelay")
    assert [m.body for m in await mc.pull_all("g-dpush", "TDelay", 0)] == [b"%d" % i for i in range(8)]
