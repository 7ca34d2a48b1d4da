"""RouteInfoManager, one test per rule of spec/rocketmq-replication.md §2.2, §2.4 and §2.5."""

from __future__ import annotations

import pytest

from common.perm import PERM_READ, PERM_WRITE
from namesrv.route_table import DataVersion, QueueData, RegisterResult, RouteInfoManager, TopicConfig

MASTER = "10.0.0.1:10911"
MASTER_HA = "10.0.0.1:10912"
SLAVE = "10.0.0.2:10911"
SLAVE_HA = "10.0.0.2:10912"
V1 = DataVersion(1000, 1)
V2 = DataVersion(2000, 2)


def register(table, *, addr, broker_id, name="broker-a", cluster="DefaultCluster", ha="", dv=V1, topics=(), now=0,
             timeout=0):
    result = table.register_broker(
        cluster=cluster,
        broker_name=name,
        broker_addr=addr,
        broker_id=broker_id,
        ha_server_addr=ha,
        data_version=dv,
        topic_configs=[TopicConfig(t) if isinstance(t, str) else t for t in topics],
        now_ms=now,
        timeout_ms=timeout,
    )
    table.check_invariants()
    return result


@pytest.fixture
def table():
    return RouteInfoManager(default_timeout_ms=120_000)


def test_master_registration_creates_cluster_broker_data_and_queue_data(table):
    register(table, addr=MASTER, broker_id=0, ha=MASTER_HA, topics=["T"])
    assert table.cluster_addr_table == {"DefaultCluster": {"broker-a"}}
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: MASTER}
    assert table.topic_queue_table["T"] == {"broker-a": QueueData("broker-a", 16, 16, PERM_READ | PERM_WRITE, 0)}
    assert table.broker_live_table[MASTER].ha_server_addr == MASTER_HA


def test_route_holds_the_masters_queue_data_and_every_address_of_the_group(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    register(table, addr=SLAVE, broker_id=1)
    route = table.pickup_topic_route("T")
    assert route is not None
    assert route.queue_datas == [QueueData("broker-a", 16, 16, 6, 0)]
    assert [bd.broker_addrs for bd in route.broker_datas] == [{0: MASTER, 1: SLAVE}]


def test_route_of_an_unknown_topic_is_none(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    assert table.pickup_topic_route("nope") is None


def test_route_returns_copies_the_caller_cannot_corrupt(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    table.pickup_topic_route("T").broker_datas[0].broker_addrs[7] = "x:1"
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: MASTER}


def test_slave_registration_never_touches_queue_data(table):
    register(table, addr=SLAVE, broker_id=1, topics=["T"])
    assert table.topic_queue_table == {}
    assert table.pickup_topic_route("T") is None


def test_slave_reply_carries_the_masters_ha_and_broker_address(table):
    register(table, addr=MASTER, broker_id=0, ha=MASTER_HA)
    result = register(table, addr=SLAVE, broker_id=1, ha=SLAVE_HA)
    assert (result.ha_server_addr, result.master_addr) == (MASTER_HA, MASTER)


def test_slave_reply_is_empty_before_the_master_registers(table):
    result = register(table, addr=SLAVE, broker_id=1, ha=SLAVE_HA)
    assert (result.ha_server_addr, result.master_addr) == ("", "")


def test_master_reply_carries_no_master_address(table):
    result = register(table, addr=MASTER, broker_id=0, ha=MASTER_HA)
    assert (result.ha_server_addr, result.master_addr) == ("", "")


def test_queue_data_is_rebuilt_only_when_the_data_version_changes(table):
    register(table, addr=MASTER, broker_id=0, dv=V1, topics=[TopicConfig("T", 4, 4)])
    register(table, addr=MASTER, broker_id=0, dv=V1, topics=[TopicConfig("T", 8, 8)])
    assert table.topic_queue_table["T"]["broker-a"].write_queue_nums == 4
    register(table, addr=MASTER, broker_id=0, dv=V2, topics=[TopicConfig("T", 8, 8)])
    assert table.topic_queue_table["T"]["broker-a"].write_queue_nums == 8


def test_incremental_registration_adds_a_topic_and_keeps_the_others(table):
    register(table, addr=MASTER, broker_id=0, dv=V1, topics=["T1", "T2"])
    register(table, addr=MASTER, broker_id=0, dv=V2, topics=["T3"])
    assert table.all_topics() == ["T1", "T2", "T3"]


def test_one_id_per_address_so_a_promoted_slave_replaces_its_old_id(table):
    register(table, addr=SLAVE, broker_id=1)
    register(table, addr=SLAVE, broker_id=0, topics=["T"])
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE}


def test_a_master_of_a_newer_epoch_keeps_id_0_against_an_old_master_that_still_registers(table):
    # controller mode: stateVersion is the masterEpoch; the old master (partitioned from the controller, not from
    # us) has not learned its demotion and registers as brokerId 0 again
    register(table, addr=MASTER, broker_id=0, dv=DataVersion(1000, 1, state_version=1), topics=["T"])
    register(table, addr=SLAVE, broker_id=0, dv=DataVersion(2000, 1, state_version=2), topics=["T"])
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE}
    refused = register(table, addr=MASTER, broker_id=0, dv=DataVersion(1000, 2, state_version=1), topics=["T"])
    assert refused == RegisterResult()
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE}
    assert MASTER not in table.broker_live_table  # refused, so not kept alive either
    # once it registers with the epoch it now holds (as a slave), it is back under its own id
    register(table, addr=MASTER, broker_id=1, dv=DataVersion(1000, 2, state_version=2))
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE, 1: MASTER}


def test_classic_brokers_with_state_version_0_replace_id_0_as_before(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    register(table, addr=SLAVE, broker_id=0, topics=["T"])
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE}


def test_first_registration_under_a_new_id_writes_queue_data_even_with_the_same_data_version(table):
    register(table, addr=SLAVE, broker_id=1, dv=V1, topics=["T"])
    register(table, addr=SLAVE, broker_id=0, dv=V1, topics=["T"])
    assert "T" in table.topic_queue_table


def test_unregister_of_the_last_broker_removes_group_cluster_and_topics(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    assert table.unregister_broker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=MASTER, broker_id=0)
    table.check_invariants()
    assert (table.broker_addr_table, table.cluster_addr_table, table.topic_queue_table) == ({}, {}, {})
    assert table.broker_live_table == {}


def test_unregister_of_the_master_keeps_the_slave_and_the_queue_data(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    register(table, addr=SLAVE, broker_id=1)
    table.unregister_broker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=MASTER, broker_id=0)
    route = table.pickup_topic_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {1: SLAVE}


def test_late_unregister_from_a_replaced_address_does_not_remove_its_successor(table):
    register(table, addr=MASTER, broker_id=0)
    register(table, addr="10.0.0.9:10911", broker_id=0)
    table.unregister_broker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=MASTER, broker_id=0)
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.9:10911"}


def test_when_only_the_master_dies_its_queue_data_stays_for_the_slaves(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    register(table, addr=SLAVE, broker_id=1)
    assert table.on_channel_destroy(MASTER)
    table.check_invariants()
    route = table.pickup_topic_route("T")
    assert route.queue_datas == [QueueData("broker-a", 16, 16, 6, 0)]
    assert route.broker_datas[0].broker_addrs == {1: SLAVE}
    assert MASTER not in table.broker_live_table


def test_slave_reply_is_empty_once_the_master_died(table):
    register(table, addr=MASTER, broker_id=0, ha=MASTER_HA)
    table.on_channel_destroy(MASTER)
    result = register(table, addr=SLAVE, broker_id=1)
    assert (result.ha_server_addr, result.master_addr) == ("", "")


def test_when_the_whole_group_dies_its_topics_and_cluster_go(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    register(table, addr="10.0.1.1:10911", broker_id=0, name="broker-b", topics=["T", "U"])
    register(table, addr=SLAVE, broker_id=1)
    table.on_channel_destroy(MASTER)
    table.on_channel_destroy(SLAVE)
    table.check_invariants()
    assert table.cluster_addr_table == {"DefaultCluster": {"broker-b"}}
    assert [q.broker_name for q in table.pickup_topic_route("T").queue_datas] == ["broker-b"]


def test_channel_destroy_of_an_unknown_address_changes_nothing(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"])
    assert not table.on_channel_destroy("10.9.9.9:1")
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: MASTER}


def test_scan_drops_only_brokers_silent_beyond_their_timeout(table):
    register(table, addr=MASTER, broker_id=0, topics=["T"], now=0)
    register(table, addr=SLAVE, broker_id=1, now=0, timeout=10_000)
    assert table.scan_not_active(10_000) == []
    expired = table.scan_not_active(10_001)
    assert [(e.broker_addr, e.silent_ms, e.timeout_ms) for e in expired] == [(SLAVE, 10_001, 10_000)]
    assert table.scan_not_active(120_000) == []
    assert [e.broker_addr for e in table.scan_not_active(120_001)] == [MASTER]
    assert table.broker_addr_table == {} and table.topic_queue_table == {}


def test_touch_refreshes_a_registered_broker_and_ignores_strangers(table):
    register(table, addr=MASTER, broker_id=0, now=0)
    assert table.touch(MASTER, 100_000)
    assert not table.touch("10.9.9.9:1", 100_000)
    assert table.scan_not_active(200_000) == []


def test_delete_topic_everywhere_or_per_cluster(table):
    register(table, addr=MASTER, broker_id=0, cluster="C1", topics=["T"])
    register(table, addr="10.0.1.1:10911", broker_id=0, name="broker-b", cluster="C2", topics=["T"])
    assert table.delete_topic("T", "C1")
    assert list(table.topic_queue_table["T"]) == ["broker-b"]
    assert not table.delete_topic("T", "C1")
    assert table.delete_topic("T")
    assert table.pickup_topic_route("T") is None and not table.delete_topic("T")


def test_wipe_write_perm_clears_the_write_bit_of_one_group_and_counts_topics(table):
    register(table, addr=MASTER, broker_id=0, topics=["T", "U"])
    register(table, addr="10.0.1.1:10911", broker_id=0, name="broker-b", topics=["T"])
    assert table.wipe_write_perm("broker-a") == 2
    assert table.topic_queue_table["T"]["broker-a"].perm == PERM_READ
    assert table.topic_queue_table["T"]["broker-b"].perm == PERM_READ | PERM_WRITE
    assert table.wipe_write_perm("nope") == 0


def test_live_brokers_and_identity_describe_every_registered_address(table):
    register(table, addr=MASTER, broker_id=0, ha=MASTER_HA, now=5)
    register(table, addr=SLAVE, broker_id=1, ha=SLAVE_HA, now=6)
    live = {(b.broker_addr, b.broker_name, b.broker_id, b.info.last_update_ms) for b in table.live_brokers()}
    assert live == {(MASTER, "broker-a", 0, 5), (SLAVE, "broker-a", 1, 6)}
    assert table.broker_identity(SLAVE) == ("broker-a", 1)
    assert table.broker_identity("10.9.9.9:1") is None


def test_a_closed_connection_drops_the_brokers_registered_over_it_and_only_those(table):
    old, other = object(), object()
    table.register_broker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=MASTER, broker_id=0,
                          ha_server_addr=MASTER_HA, data_version=V1, topic_configs=[TopicConfig("T")], now_ms=0,
                          channel=old)
    table.register_broker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=SLAVE, broker_id=1,
                          ha_server_addr=SLAVE_HA, data_version=V1, topic_configs=[], now_ms=0, channel=other)
    assert table.channel_in_use(old)
    assert table.on_channel_close(old) == [MASTER]
    table.check_invariants()
    assert not table.channel_in_use(old) and table.channel_in_use(other)
    assert table.pickup_topic_route("T").broker_datas[0].broker_addrs == {1: SLAVE}


def test_the_late_close_of_an_old_connection_keeps_a_broker_that_registered_over_a_new_one(table):
    old, new = object(), object()
    for channel in (old, new):
        table.register_broker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=MASTER, broker_id=0,
                              ha_server_addr=MASTER_HA, data_version=V1, topic_configs=[TopicConfig("T")], now_ms=0,
                              channel=channel)
    assert table.on_channel_close(old) == []
    assert table.pickup_topic_route("T").broker_datas[0].broker_addrs == {0: MASTER}
    assert table.on_channel_close(new) == [MASTER]
    assert table.pickup_topic_route("T") is None


def test_expiry_names_the_channel_so_housekeeping_can_close_it(table):
    channel = object()
    table.register_broker(cluster="C", broker_name="broker-a", broker_addr=MASTER, broker_id=0, ha_server_addr="",
                          data_version=V1, topic_configs=[], now_ms=0, channel=channel)
    [expired] = table.scan_not_active(120_001)
    assert expired.channel is channel


def test_query_data_version_reports_a_change_and_refreshes_an_unchanged_broker(table):
    register(table, addr=MASTER, broker_id=0, dv=V1, now=0)
    assert table.query_data_version(MASTER, V2, 100_000) == (True, V1)
    assert [e.broker_addr for e in table.scan_not_active(120_001)] == [MASTER]  # a change is no heartbeat
    register(table, addr=MASTER, broker_id=0, dv=V1, now=0)
    assert table.query_data_version(MASTER, V1, 100_000) == (False, V1)
    assert table.scan_not_active(200_000) == []
    assert table.query_data_version("10.9.9.9:1", V1, 0) == (True, None)


def test_state_version_takes_no_part_in_the_data_version_comparison():
    assert DataVersion(1, 2, state_version=5) == DataVersion(1, 2)


def test_add_write_perm_makes_every_queue_data_of_the_group_read_write(table):
    register(table, addr=MASTER, broker_id=0, topics=[TopicConfig("T", perm=PERM_READ), "U"])
    register(table, addr="10.0.1.1:10911", broker_id=0, name="broker-b", topics=[TopicConfig("T", perm=PERM_READ)])
    assert table.add_write_perm("broker-a") == 2
    assert table.topic_queue_table["T"]["broker-a"].perm == PERM_READ | PERM_WRITE
    assert table.topic_queue_table["T"]["broker-b"].perm == PERM_READ
    assert table.add_write_perm("nope") == 0


def test_topics_by_cluster_lists_topics_served_by_the_clusters_groups(table):
    register(table, addr=MASTER, broker_id=0, cluster="C1", topics=["T", "U"])
    register(table, addr="10.0.1.1:10911", broker_id=0, name="broker-b", cluster="C2", topics=["T", "V"])
    assert table.topics_by_cluster("C1") == ["T", "U"]
    assert table.topics_by_cluster("C2") == ["T", "V"]
    assert table.topics_by_cluster("nope") == []
