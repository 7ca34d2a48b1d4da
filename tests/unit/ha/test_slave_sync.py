"""SlaveSynchronize against the master's real GET_ALL_* processors over real remoting on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.config import BrokerRole
from broker.context import BrokerContext
from broker.metadata.consumer_offsets import ConsumerOffsetManager
from broker.metadata.delay_offsets import DelayOffsetManager
from broker.metadata.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.metadata.topics import TopicConfig, TopicConfigManager
from broker.processors import slave_sync_serve
from broker.slave_notify import SlaveNotifier
from broker.slave_sync import (
    SlaveSynchronize,
    fetch_slave_addrs,
    group_internal_addr,
    parse_consumer_offsets,
    pull_offsets_from_slaves,
    slave_addrs_from_cluster_info,
)
from remoting import fastjson
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.frame_codec import RemotingCommand, response_to
from remoting.server import RemotingServer
from harness.waiting import async_wait_until
from tests.unit.ha.harness import free_port, settings

pytestmark = pytest.mark.timeout(60)


class Managers:
    def __init__(self, root: Path) -> None:
        cfg = root / "config"
        self.topics = TopicConfigManager(cfg)
        self.groups = SubscriptionGroupManager(cfg)
        self.offsets = ConsumerOffsetManager(cfg)
        self.delay_offsets = DelayOffsetManager(cfg)

    def kw(self) -> dict:
        return {"topics": self.topics, "groups": self.groups, "offsets": self.offsets,
                "delay_offsets": self.delay_offsets}


async def sync_server(root: Path, managers: Managers, role: BrokerRole, notifier: SlaveNotifier | None = None
                      ) -> tuple[RemotingServer, str]:
    """A remoting server with only the GET_ALL_* processors, over the managers (no store, no HA); with ``notifier``
    its subscribers get NOTIFY_METADATA_CHANGED."""
    ctx = BrokerContext(settings=settings(root, role, broker_id=0 if role.is_master else 1), store=None,
                        clients=None, hold=None, slave_notifier=notifier, **managers.kw())
    server = RemotingServer("broker", "127.0.0.1", 0)
    slave_sync_serve.register(server, ctx)
    port = await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def master(tmp_path):
    m = Managers(tmp_path / "m")
    m.topics.update(TopicConfig("OrderTopic", 4, 4))
    m.groups.update(SubscriptionGroupConfig("G1", broker_id=1))
    m.offsets.commit("G1", "OrderTopic", 0, 100)
    m.offsets.commit("G1", "OrderTopic", 1, 50)
    m.delay_offsets.set(3, 42)
    server, addr = await sync_server(tmp_path / "m", m, BrokerRole.SYNC_MASTER)
    yield m, addr
    await server.stop(0)


@contextlib.asynccontextmanager
async def pushing_pair(tmp_path: Path, m: Managers) -> AsyncIterator[tuple[SlaveNotifier, Managers, SlaveSynchronize]]:
    """A master over ``m`` whose notifier hears every table, as broker/server.py wires it, and a slave (its managers
    under tmp_path/s) whose periodic round is an hour away: it subscribes with the round it runs at once, so
    whatever it holds later came by push (or by an explicit ``sync_all``)."""
    notifier = SlaveNotifier(**m.kw())
    for table in (m.topics, m.groups):
        table.change_listeners.append(notifier.on_tables_changed)
    m.offsets.change_listeners.append(notifier.on_offsets_changed)
    m.delay_offsets.change_listeners.append(notifier.on_delay_offsets_changed)
    server, addr = await sync_server(tmp_path / "m", m, BrokerRole.SYNC_MASTER, notifier)
    await notifier.start()
    s = Managers(tmp_path / "s")
    sync = SlaveSynchronize(**s.kw(), interval_ms=3_600_000, initial_delay_s=3600)
    sync.update_master_addr(addr)  # a round at once, which subscribes
    await sync.start()
    try:
        yield notifier, s, sync
    finally:
        await sync.stop()
        await notifier.stop()
        await server.stop(0)


async def test_the_sync_answers_are_rocketmq_bodies_with_state_version_and_the_reset_versions(master):
    m, addr = master
    m.offsets.reset("G1", "OrderTopic", {0: 7})
    client = RemotingClient()
    try:
        topics = await client.invoke(addr, RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG), 5)
        body = fastjson.loads(topics.body_bytes())
        assert topics.code == 0 and set(body) == {"dataVersion", "topicConfigTable"}
        assert body["dataVersion"] == {"counter": m.topics.data_version.counter, "stateVersion": 0,
                                       "timestamp": m.topics.data_version.timestamp}
        assert body["topicConfigTable"]["OrderTopic"] == {
            "attributes": {}, "order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
            "topicName": "OrderTopic", "topicSysFlag": 0, "writeQueueNums": 4}
        groups = fastjson.loads((await client.invoke(
            addr, RemotingCommand(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 5)).body_bytes())
        assert groups["subscriptionGroupTable"]["G1"]["brokerId"] == 1
        assert groups["subscriptionGroupTable"]["G1"]["whichBrokerWhenConsumeSlowly"] == 1
        assert set(groups["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
        offsets = await client.invoke(addr, RemotingCommand(RequestCode.GET_ALL_CONSUMER_OFFSET), 5)
        raw = offsets.body_bytes()
        assert b'"offsetTable":{"OrderTopic@G1":{"0":7}}' in raw  # quoted keys, fastjson reads them
        table, versions = parse_consumer_offsets(fastjson.loads(raw))
        assert table == {"OrderTopic@G1": {0: 7}} and versions["OrderTopic@G1"] == m.offsets.reset_versions[
            "OrderTopic@G1"]
        delay = await client.invoke(addr, RemotingCommand(RequestCode.GET_ALL_DELAY_OFFSET), 5)
        delay_body = fastjson.loads(delay.body_bytes())
        assert delay_body["offsetTable"] == {"3": 42}
        assert delay_body["dataVersion"]["counter"] == 0  # RocketMQ 5's wrapper has one; pyrmq's tables keep none
    finally:
        await client.close()


async def test_one_round_copies_topics_groups_delay_offsets_and_merges_offsets_monotonically(tmp_path, master):
    m, addr = master
    s = Managers(tmp_path / "s")
    s.offsets.commit("G1", "OrderTopic", 0, 150)  # a consumer committed on the slave while the master was away
    sync = SlaveSynchronize(**s.kw())
    sync.update_master_addr(addr)
    try:
        assert await sync.sync_all()
        assert s.topics.get("OrderTopic").write_queue_nums == 4
        assert s.topics.data_version == m.topics.data_version
        assert s.groups.get("G1").broker_id == 1
        assert s.groups.data_version == m.groups.data_version
        assert s.delay_offsets.get(3) == 42
        assert s.offsets.queues_of("G1", "OrderTopic") == {0: 150, 1: 50}  # larger wins; never rolled back
        assert (tmp_path / "s" / "config" / "consumerOffset.json").exists()
        assert (tmp_path / "s" / "config" / "topics.json").exists()
        # an explicit reset on the master does move the slave back: its reset version travels in resetVersion
        m.offsets.reset("G1", "OrderTopic", {0: 10, 1: 10})
        assert await sync.sync_all()
        assert s.offsets.queues_of("G1", "OrderTopic") == {0: 10, 1: 10}
        # a deleted topic disappears from the slave at the next round (the DataVersion moved)
        m.topics.delete("OrderTopic")
        assert await sync.sync_all()
        assert s.topics.get("OrderTopic") is None
    finally:
        await sync.stop()


async def test_a_java_masters_bare_numeric_keys_are_read_too(tmp_path):
    s = Managers(tmp_path / "s")

    def java_offsets(conn, req):
        return response_to(req, 0, body=b'{"offsetTable":{"T@G":{0:12,1:3}}}')

    server = RemotingServer("java-broker", "127.0.0.1", 0)
    server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, java_offsets)
    addr = f"127.0.0.1:{await server.start()}"
    sync = SlaveSynchronize(**s.kw())
    sync.update_master_addr(addr)
    try:
        await sync.sync_consumer_offset(addr)
        assert s.offsets.queues_of("G", "T") == {0: 12, 1: 3}
    finally:
        await sync.stop()
        await server.stop(0)


async def test_each_step_logs_its_own_failure_and_no_master_skips_the_round(tmp_path, caplog):
    s = Managers(tmp_path / "s")
    sync = SlaveSynchronize(**s.kw(), rpc_timeout_s=0.5)
    assert await sync.sync_all() is False and sync.rounds == 0  # no master address yet
    sync.update_master_addr(f"127.0.0.1:{free_port()}")
    caplog.set_level(logging.WARNING)
    assert await sync.sync_all() is False
    assert sync.failures == 4
    for step in ("topic config", "consumer offsets", "delay offsets", "subscription groups"):
        assert f"slave sync of {step} from master" in caplog.text
    await sync.stop()


async def test_a_refusing_master_is_logged_with_its_code_and_remark(tmp_path, caplog):
    server = RemotingServer("odd-broker", "127.0.0.1", 0)  # serves nothing: every code answers 3 with a remark
    addr = f"127.0.0.1:{await server.start()}"
    s = Managers(tmp_path / "s")
    sync = SlaveSynchronize(**s.kw())
    sync.update_master_addr(addr)
    caplog.set_level(logging.WARNING)
    try:
        assert await sync.sync_all() is False
        assert "GET_ALL_TOPIC_CONFIG from" in caplog.text and "REQUEST_CODE_NOT_SUPPORTED" in caplog.text
        assert "request type 21 not supported" in caplog.text
    finally:
        await sync.stop()
        await server.stop(0)


async def test_the_service_runs_its_first_round_after_the_initial_delay(tmp_path, master):
    _, addr = master
    s = Managers(tmp_path / "s")
    sync = SlaveSynchronize(**s.kw(), interval_ms=200, initial_delay_s=0.05)
    sync.update_master_addr(addr)
    await sync.start()
    try:
        await async_wait_until(lambda: sync.rounds >= 2, 10, "two sync rounds")
        assert s.topics.get("OrderTopic") is not None
    finally:
        await sync.stop()


async def test_a_restarting_master_takes_the_offsets_its_slave_accepted_while_it_was_down(tmp_path):
    stale = Managers(tmp_path / "m")
    stale.offsets.commit("G1", "OrderTopic", 0, 100)
    slave = Managers(tmp_path / "s")
    slave.offsets.commit("G1", "OrderTopic", 0, 180)
    slave.offsets.commit("G2", "Other", 3, 7)
    server, slave_addr = await sync_server(tmp_path / "s", slave, BrokerRole.SLAVE)
    try:
        dead = f"127.0.0.1:{free_port()}"
        result = await pull_offsets_from_slaves(stale.offsets, [slave_addr, dead], timeout_s=0.5)
        assert result == {slave_addr: 2, dead: -1}
        assert stale.offsets.queues_of("G1", "OrderTopic") == {0: 180}
        assert stale.offsets.queues_of("G2", "Other") == {3: 7}
    finally:
        await server.stop(0)


# The compose cluster: brokerIP1=127.0.0.1 (for clients on the host), brokerIP2=<service name> (for the group).
CLUSTER_INFO = {
    "brokerAddrTable": {
        "broker-a": {
            "brokerAddrs": {0: "127.0.0.1:10911", 1: "127.0.0.1:10921", 2: "10.0.0.9:10951"},
            "brokerName": "broker-a",
            "cluster": "DefaultCluster",
        }
    },
    "brokerLiveTable": {
        "127.0.0.1:10921": {"haServerAddr": "broker-a-s:10922"},
        "127.0.0.1:10911": {"haServerAddr": "broker-a:10912"},
    },
    "clusterAddrTable": {"DefaultCluster": ["broker-a"]},
}


def test_slaves_are_reached_over_the_group_internal_address_not_the_client_address():
    # A slave without live info keeps its registered address; a master is never listed.
    assert slave_addrs_from_cluster_info(CLUSTER_INFO, "broker-a") == ["broker-a-s:10921", "10.0.0.9:10951"]
    assert slave_addrs_from_cluster_info(CLUSTER_INFO, "broker-b") == []
    assert group_internal_addr("127.0.0.1:10911", "broker-a:10912") == "broker-a:10911"
    assert group_internal_addr("10.0.0.1:10911", "") == "10.0.0.1:10911"
    rocketmq_info = {k: v for k, v in CLUSTER_INFO.items() if k != "brokerLiveTable"}  # a Java nameserver's
    assert slave_addrs_from_cluster_info(rocketmq_info, "broker-a") == ["127.0.0.1:10921", "10.0.0.9:10951"]


async def test_the_slave_list_comes_from_the_first_nameserver_that_answers_cluster_info():
    def cluster_info(conn, req):
        return response_to(req, 0, body=fastjson.dumps(CLUSTER_INFO))

    ns = RemotingServer("namesrv", "127.0.0.1", 0)
    ns.register(RequestCode.GET_BROKER_CLUSTER_INFO, cluster_info)
    addr = f"127.0.0.1:{await ns.start()}"
    try:
        dead = f"127.0.0.1:{free_port()}"
        assert await fetch_slave_addrs([dead, addr], "broker-a", timeout_s=0.5) == ["broker-a-s:10921",
                                                                                    "10.0.0.9:10951"]
    finally:
        await ns.stop(0)


async def test_pushed_delay_offsets_only_move_forward_and_the_round_replaces_them(tmp_path):
    """The master's schedule service moves a level: the push brings it (the round is an hour away); a level the
    master moved back stays where it was on the slave until a round brings the master's whole table."""
    m = Managers(tmp_path / "m")
    m.delay_offsets.set(3, 42)
    async with pushing_pair(tmp_path, m) as (notifier, s, sync):
        await async_wait_until(lambda: s.delay_offsets.get(3) == 42 and notifier.subscribers, 10, "the first round")
        m.delay_offsets.set(1, 10)
        await async_wait_until(lambda: s.delay_offsets.get(1) == 10, 5, "level 1 at 10 pushed to the slave", 0.01)
        m.delay_offsets.set(1, 4)  # the master's queue lost the offset (OFFSET_OVERFLOW_BADLY)
        m.delay_offsets.set(2, 7)  # pushed with it or after it, on the same connection
        await async_wait_until(lambda: s.delay_offsets.get(2) == 7, 5, "level 2 at 7 pushed to the slave", 0.01)
        assert s.delay_offsets.snapshot() == {1: 10, 2: 7, 3: 42}
        assert await sync.sync_all()
        assert s.delay_offsets.snapshot() == {1: 4, 2: 7, 3: 42}


async def test_a_slave_that_pulled_a_change_wakes_the_update_waiting_for_it(tmp_path):
    """updateTopic answers once the slaves hold the change (``replicated``): the slave's report must wake that wait.
    A report once raised in the master (an attribute that did not exist), so every update waited out its bound:
    1,000 topics created one after another would have taken about 1,000 s."""
    from broker.slave_notify import TOPICS

    m = Managers(tmp_path / "m")
    async with pushing_pair(tmp_path, m) as (notifier, s, _sync):
        await async_wait_until(lambda: notifier.subscribers, 10, "the slave subscribed")
        for i in range(3):
            m.topics.update(TopicConfig(f"Fresh{i}", 4, 4))
            async with asyncio.timeout(10):  # the bound below is an hour: only the slave's report ends the wait
                assert await notifier.replicated(TOPICS, m.topics.data_version.counter, 3600) == []
            assert s.topics.get(f"Fresh{i}") is not None
