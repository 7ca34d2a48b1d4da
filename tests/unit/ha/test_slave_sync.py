"""SlaveSynchronize against the real BrokerAdmin servicer over real gRPC on loopback."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker.config import BrokerRole
from broker.grpc.admin import BrokerAdminServicer
from broker.context import BrokerContext
from broker.metadata.consumer_offsets import ConsumerOffsetManager
from broker.metadata.delay_offsets import DelayOffsetManager
from broker.metadata.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.metadata.topics import TopicConfig, TopicConfigManager
from broker.slave_sync import SlaveSynchronize, pull_offsets_from_slaves
from remoting.channel import aio_server, bind
from remoting.pb import admin_pb2_grpc
from tests.support.waiting import async_wait_until
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
        return dict(topics=self.topics, groups=self.groups, offsets=self.offsets, delay_offsets=self.delay_offsets)


async def admin_server(root: Path, managers: Managers, role: BrokerRole):
    ctx = BrokerContext(settings=settings(root, role, broker_id=0 if role.is_master else 1), store=None,
                        clients=None, hold=None, **managers.kw())
    server = aio_server()
    admin_pb2_grpc.add_BrokerAdminServicer_to_server(BrokerAdminServicer(ctx), server)
    port = bind(server, "127.0.0.1", 0)
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def master(tmp_path):
    m = Managers(tmp_path / "m")
    m.topics.update(TopicConfig("OrderTopic", 4, 4))
    m.groups.update(SubscriptionGroupConfig("G1", broker_id=1))
    m.offsets.commit("G1", "OrderTopic", 0, 100)
    m.offsets.commit("G1", "OrderTopic", 1, 50)
    m.delay_offsets.set(3, 42)
    server, addr = await admin_server(tmp_path / "m", m, BrokerRole.SYNC_MASTER)
    yield m, addr
    await server.stop(0)


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
        assert s.delay_offsets.get(3) == 42
        assert s.offsets.queues_of("G1", "OrderTopic") == {0: 150, 1: 50}  # larger wins; never rolled back
        assert (tmp_path / "s" / "config" / "consumerOffset.json").exists()
        assert (tmp_path / "s" / "config" / "topics.json").exists()
        # an explicit reset on the master does move the slave back
        m.offsets.reset("G1", "OrderTopic", {0: 10, 1: 10})
        assert await sync.sync_all()
        assert s.offsets.queues_of("G1", "OrderTopic") == {0: 10, 1: 10}
    finally:
        await sync.stop()


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
    server, slave_addr = await admin_server(tmp_path / "s", slave, BrokerRole.SLAVE)
    try:
        dead = f"127.0.0.1:{free_port()}"
        result = await pull_offsets_from_slaves(stale.offsets, [slave_addr, dead], timeout_s=0.5)
        assert result == {slave_addr: 2, dead: -1}
        assert stale.offsets.queues_of("G1", "OrderTopic") == {0: 180}
        assert stale.offsets.queues_of("G2", "Other") == {3: 7}
    finally:
        await server.stop(0)


def test_slaves_are_reached_over_the_group_internal_address_not_the_client_address():
    from broker.slave_sync import group_internal_addr, slave_addrs_from_cluster_info
    from remoting.pb import namesrv_pb2

    # The compose cluster: brokerIP1=127.0.0.1 (for clients on the host), brokerIP2=<service name> (for the group).
    resp = namesrv_pb2.GetBrokerClusterInfoResponse(
        broker_addr_table={
            "broker-a": namesrv_pb2.BrokerData(
                cluster="DefaultCluster",
                broker_name="broker-a",
                broker_addrs={0: "127.0.0.1:10911", 1: "127.0.0.1:10921", 2: "10.0.0.9:10951"},
            )
        },
        live_brokers=[
            namesrv_pb2.LiveBroker(broker_addr="127.0.0.1:10921", ha_server_addr="broker-a-s:10922"),
            namesrv_pb2.LiveBroker(broker_addr="127.0.0.1:10911", ha_server_addr="broker-a:10912"),
        ],
    )
    # A slave without live info keeps its registered address; a master is never listed.
    assert slave_addrs_from_cluster_info(resp, "broker-a") == ["broker-a-s:10921", "10.0.0.9:10951"]
    assert slave_addrs_from_cluster_info(resp, "broker-b") == []
    assert group_internal_addr("127.0.0.1:10911", "broker-a:10912") == "broker-a:10911"
    assert group_internal_addr("10.0.0.1:10911", "") == "10.0.0.1:10911"
