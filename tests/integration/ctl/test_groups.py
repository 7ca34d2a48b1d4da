"""updateSubGroup / deleteSubGroup checked against the brokers' own GET_ALL_SUBSCRIPTIONGROUP_CONFIG."""

from __future__ import annotations

import asyncio

import pytest

from client.admin import AdminClient
from client.admin_bodies import SubscriptionGroupConfig
from tests.integration.ctl.cli import CLUSTER, mqctl, ok, ok_json, unique
from harness.waiting import wait_until

pytestmark = pytest.mark.integration

SLAVE_SYNC_TIMEOUT_S = 15.0


def groups_on(addr: str) -> dict[str, SubscriptionGroupConfig]:
    """What the broker itself says (GET_ALL_SUBSCRIPTIONGROUP_CONFIG straight to it, not through mqctl)."""

    async def read() -> dict[str, SubscriptionGroupConfig]:
        async with AdminClient("", timeout_s=5.0) as admin:
            return {g.group_name: g for g in (await admin.all_subscription_groups(addr)).groups}

    return asyncio.run(read())


def test_update_sub_group_with_slave_read_ids_is_stored_by_the_broker(cluster):
    group = unique("g_slave_read")
    lines = ok(
        "updateSubGroup",
        "-n",
        cluster.namesrv_addr,
        "-b",
        cluster.addr("broker-a"),
        "-g",
        group,
        "-i",
        "1",
        "-w",
        "1",
        "-q",
        "2",
        "-r",
        "5",
    ).stdout.splitlines()
    assert lines[0] == f"create subscription group to {cluster.addr('broker-a')} success."
    assert lines[1].startswith(f"SubscriptionGroupConfig [groupName={group}, consumeEnable=true, ")
    stored = groups_on(cluster.addr("broker-a"))[group]
    assert (stored.broker_id, stored.which_broker_when_consume_slowly) == (1, 1)
    assert (stored.retry_queue_nums, stored.retry_max_times) == (2, 5)
    assert stored.consume_enable and stored.notify_consumer_ids_changed_enable
    # mqadmin's CLI defaults: these two are false unless given
    assert not stored.consume_from_min_enable and not stored.consume_broadcast_enable
    assert group not in groups_on(cluster.addr("broker-b"))


def test_update_sub_group_on_a_cluster_writes_every_master(cluster):
    group = unique("g_cluster")
    data = ok_json(
        "updateSubGroup", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-g", group, "-m", "true", "-s", "false"
    )
    assert sorted(data["brokers"]) == sorted([cluster.addr("broker-a"), cluster.addr("broker-b")])
    assert data["failed"] == []
    for master in ("broker-a", "broker-b"):
        stored = groups_on(cluster.addr(master))[group]
        assert stored.consume_from_min_enable and not stored.consume_enable
        assert not stored.consume_message_orderly


def test_update_sub_group_sets_rocketmq_5_fifo_pop(cluster):
    """-o true is RocketMQ 5's consumeMessageOrderly: the group's RocketMQ 5 clients get FIFO pop."""
    group = unique("g_fifo")
    data = ok_json("updateSubGroup", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-a"), "-g", group,
                   "-o", "true")
    assert data["brokers"] == [cluster.addr("broker-a")]
    assert groups_on(cluster.addr("broker-a"))[group].consume_message_orderly


def test_a_group_updated_on_the_cluster_reaches_the_slaves_by_metadata_sync(cluster):
    group = unique("g_synced")
    ok("updateSubGroup", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-g", group, "-i", "1")
    wait_until(
        lambda: group in groups_on(cluster.addr("broker-a-s")),
        SLAVE_SYNC_TIMEOUT_S,
        f"slave broker-a-s never synchronised group {group}",
    )


def test_delete_sub_group_removes_it_from_the_broker(cluster):
    group = unique("g_delete")
    ok("updateSubGroup", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-g", group)
    assert group in groups_on(cluster.addr("broker-b"))
    out = ok(
        "deleteSubGroup", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-b"), "-g", group, "-r", "true"
    ).stdout
    addr = cluster.addr("broker-b")
    assert out.splitlines() == [f"delete subscription group [{group}] from broker [{addr}] success."]
    assert group not in groups_on(cluster.addr("broker-b"))
    assert group in groups_on(cluster.addr("broker-a"))


def test_update_sub_group_with_both_broker_and_cluster_is_a_usage_error(cluster):
    result = mqctl(
        "updateSubGroup", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-a"), "-c", CLUSTER, "-g", "g_both"
    )
    assert result.exit_code == 2


def test_update_sub_group_with_a_non_numeric_broker_id_is_a_usage_error(cluster):
    result = mqctl("updateSubGroup", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-g", "g_bad", "-i", "one")
    assert result.exit_code == 2
    assert "Invalid value for '-i' / '--brokerId'" in result.stderr
