"""clusterList, brokerStatus and haStatus against a real nameserver and four brokers."""

from __future__ import annotations

import re

import pytest

from tests.integration.ctl.cli import CLUSTER, fails, mqctl, ok, ok_json, routed_topic, unique
from harness.waiting import wait_until

pytestmark = pytest.mark.integration

REPLICATION_TIMEOUT_S = 20.0


def test_cluster_list_shows_both_groups_with_master_bid_0_and_slave_bid_1(cluster):
    out = ok("clusterList", "-n", cluster.namesrv_addr).stdout
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["#Cluster", "Name", "#Broker", "Name", "#BID", "#Addr"]
    rows = {(line.split()[1], line.split()[2]): line.split()[3] for line in lines[1:]}
    assert rows == {
        ("broker-a", "0"): cluster.addr("broker-a"),
        ("broker-a", "1"): cluster.addr("broker-a-s"),
        ("broker-b", "0"): cluster.addr("broker-b"),
        ("broker-b", "1"): cluster.addr("broker-b-s"),
    }
    assert all(line.split()[0] == CLUSTER for line in lines[1:])


def test_cluster_list_json_gives_one_object_per_broker_address_with_its_role(cluster):
    rows = ok_json("clusterList", "-n", cluster.namesrv_addr)
    roles = {(r["brokerName"], r["brokerId"]): r["role"] for r in rows}
    assert set(roles) == {("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)}
    assert "SLAVE" in roles[("broker-a", 1)].upper()
    assert "MASTER" in roles[("broker-a", 0)].upper() and "MASTER" in roles[("broker-b", 0)].upper()


def test_cluster_list_filtered_by_an_unknown_cluster_names_the_known_ones(cluster):
    assert fails("clusterList", "-n", cluster.namesrv_addr, "-c", "NoSuchCluster") == (
        f"error: unknown cluster NoSuchCluster: known clusters are {CLUSTER}; "
        "pass -c with one of them (see `mqctl clusterList`)"
    )


def test_broker_status_prints_the_runtime_info_as_sorted_key_value_lines(cluster):
    out = ok("brokerStatus", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-a")).stdout
    pairs = [re.match(r"^(\S+)\s+: (.*)$", line) for line in out.splitlines()]
    assert pairs and all(pairs), out
    keys = [m.group(1) for m in pairs]
    assert keys == sorted(keys)
    assert "commitLogMaxOffset" in keys


def test_broker_status_for_a_cluster_covers_masters_and_slaves_prefixed_by_address(cluster):
    out = ok("brokerStatus", "-n", cluster.namesrv_addr, "-c", CLUSTER).stdout
    prefixes = {line.split()[0] for line in out.splitlines()}
    assert prefixes == {cluster.addr(n) for n in ("broker-a", "broker-a-s", "broker-b", "broker-b-s")}
    tables = ok_json("brokerStatus", "-n", cluster.namesrv_addr, "-c", CLUSTER)
    assert set(tables) == prefixes


def test_ha_status_of_the_cluster_prints_a_block_per_master_with_its_slave_row_once_replicating(cluster):
    topic = routed_topic(cluster, queues=1, prefix="ha_topic")
    for broker in ("broker-a", "broker-b"):
        ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "replicate me", "-b", broker)

    def slaves_caught_up():
        reports = ok_json("haStatus", "-n", cluster.namesrv_addr, "-c", CLUSTER)
        by_master = {r["masterAddr"]: r for r in reports}
        for master in ("broker-a", "broker-b"):
            report = by_master[cluster.addr(master)]
            if report["masterCommitLogMaxOffset"] <= 0 or len(report["slaves"]) != 1:
                return False
            row = report["slaves"][0]
            if row["status"] != "OK" or row["diff"] != 0:
                return False
        return reports

    wait_until(slaves_caught_up, REPLICATION_TIMEOUT_S, "the slaves did not report OK with diff 0 in haStatus")
    lines = ok("haStatus", "-n", cluster.namesrv_addr, "-c", CLUSTER).stdout.splitlines()
    assert f"#MasterAddr {cluster.addr('broker-a')}" in lines
    assert f"#MasterAddr {cluster.addr('broker-b')}" in lines
    assert lines.count("#SlaveNum 1") == 2
    assert lines.count("#InSyncSlaveNum 1") == 2
    header = next(line for line in lines if line.startswith("#SlaveAddr"))
    assert header.split() == ["#SlaveAddr", "#BrokerId", "#SlaveAckOffset", "#Diff", "#Status", "#SinceLastRead",
                              "#TransferFromWhere"]
    slave_rows = [line.split() for line in lines if line and not line.startswith("#")]
    assert len(slave_rows) == 2
    assert all(row[1] == "1" and row[3] == "0" and row[4] == "OK" for row in slave_rows)


def test_ha_status_needs_exactly_one_of_broker_or_cluster(cluster):
    result = mqctl("haStatus", "-n", cluster.namesrv_addr)
    assert result.exit_code == 2
    assert "pass exactly one of -b <brokerAddr> or -c <clusterName>" in result.stderr


def test_ha_status_of_a_master_prints_the_header_block_then_the_slave_table_header(cluster):
    lines = ok("haStatus", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-b")).stdout.splitlines()
    assert lines[0] == f"#MasterAddr {cluster.addr('broker-b')}"
    assert [line.split()[0] for line in lines[1:4]] == ["#MasterCommitLogMaxOffset", "#SlaveNum", "#InSyncSlaveNum"]
    assert all(line.split()[1].isdigit() for line in lines[1:4])
    assert lines[4].split() == ["#SlaveAddr", "#BrokerId", "#SlaveAckOffset", "#Diff", "#Status", "#SinceLastRead",
                                "#TransferFromWhere"]
    report = ok_json("haStatus", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-b"))[0]
    assert report["role"] == "ASYNC_MASTER" and report["slaveNum"] == len(report["slaves"])


def test_ha_status_of_a_slave_prints_its_view_of_the_master(cluster):
    lines = ok("haStatus", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-a-s")).stdout.splitlines()
    assert lines[0] == f"#SlaveAddr {cluster.addr('broker-a-s')}"
    assert [line.split()[0] for line in lines[1:]] == [
        "#MasterAddr",
        "#Connected",
        "#Status",
        "#SinceLastRead",
        "#CommitLogMaxOffset",
        "#LastReadTime",
        "#LastWriteTime",
    ]


def test_wipe_write_perm_drains_a_broker_group_and_add_write_perm_restores_it(cluster):
    import json

    topic = unique("t_perm")
    ok("updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic, "-r", "1", "-w", "1")

    def perms() -> dict[str, int]:
        route = json.loads(ok("topicRoute", "-n", cluster.namesrv_addr, "-t", topic).stdout)
        return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}

    wait_until(lambda: perms() == {"broker-a": 6, "broker-b": 6}, 10, f"{topic} is not routed to both masters")
    lines = ok("wipeWritePerm", "-n", cluster.namesrv_addr, "-b", "broker-b").stdout.splitlines()
    try:
        assert len(lines) == 1
        head, _, count = lines[0].rpartition(" ")
        assert head == f"wipe write perm of broker[broker-b] in name server[{cluster.namesrv_addr}] OK,"
        assert int(count) >= 1
        assert perms() == {"broker-a": 6, "broker-b": 4}
    finally:
        restored = ok_json("addWritePerm", "-n", cluster.namesrv_addr, "-b", "broker-b")
    assert [(r["namesrvAddr"], r["brokerName"]) for r in restored] == [(cluster.namesrv_addr, "broker-b")]
    assert restored[0]["topicCount"] >= 1
    assert perms() == {"broker-a": 6, "broker-b": 6}
