"""updateTopic / deleteTopic and the views that must show the change: topicList, topicRoute, topicStatus."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.integration.ctl.cli import CLUSTER, mqctl, ok, ok_json, unique
from harness.waiting import wait_until

pytestmark = pytest.mark.integration

ROUTE_TIMEOUT_S = 10.0


def create_topic(cluster, topic: str, *extra: str) -> None:
    ok("updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic, *extra)
    wait_until(
        lambda: len(json.loads(ok("topicRoute", "-n", cluster.namesrv_addr, "-t", topic).stdout)["queueDatas"]) == 2,
        ROUTE_TIMEOUT_S,
        f"{topic} is not routed to both masters",
    )


def test_update_topic_on_a_cluster_reports_each_master_then_the_config(cluster):
    topic = unique("t_update")
    lines = ok(
        "updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic, "-r", "4", "-w", "4", "-p", "6"
    ).stdout.splitlines()
    assert sorted(lines[:2]) == sorted(f"create topic to {cluster.addr(b)} success." for b in ("broker-a", "broker-b"))
    assert lines[2] == (
        f"TopicConfig [topicName={topic}, readQueueNums=4, writeQueueNums=4, perm=RW-, topicSysFlag=0, order=false]"
    )


def test_a_new_topic_shows_in_topic_list_route_and_status(cluster):
    topic = unique("t_views")
    create_topic(cluster, topic, "-r", "4", "-w", "4")

    assert topic in ok("topicList", "-n", cluster.namesrv_addr).stdout.splitlines()
    assert topic in ok_json("topicList", "-n", cluster.namesrv_addr)

    route = json.loads(ok("topicRoute", "-n", cluster.namesrv_addr, "-t", topic).stdout)
    assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] == [
        ("broker-a", 4, 4, 6),
        ("broker-b", 4, 4, 6),
    ]
    addrs = {b["brokerName"]: b["brokerAddrs"]["0"] for b in route["brokerDatas"]}
    assert addrs == {"broker-a": cluster.addr("broker-a"), "broker-b": cluster.addr("broker-b")}

    table = ok("topicRoute", "-n", cluster.namesrv_addr, "-t", topic, "-l").stdout.splitlines()
    assert table[0].split() == ["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"]
    assert [row.split()[1] for row in table[1:3]] == ["broker-a", "broker-b"]
    assert table[-1].split() == ["Total:", "2", "8", "8"]

    status = ok("topicStatus", "-n", cluster.namesrv_addr, "-t", topic).stdout.splitlines()
    assert status[0].split("  ")[0] == "#Broker Name"
    rows = ok_json("topicStatus", "-n", cluster.namesrv_addr, "-t", topic)
    assert [(r["brokerName"], r["queueId"]) for r in rows] == [("broker-a", q) for q in range(4)] + [
        ("broker-b", q) for q in range(4)
    ]
    assert all(r["minOffset"] == 0 and r["maxOffset"] == 0 for r in rows)


def test_topic_status_counts_a_sent_message_in_its_queue(cluster):
    topic = unique("t_status")
    create_topic(cluster, topic, "-r", "2", "-w", "2")
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "one", "-b", "broker-b", "-i", "1")
    rows = ok_json("topicStatus", "-n", cluster.namesrv_addr, "-t", topic)
    by_queue = {(r["brokerName"], r["queueId"]): r["maxOffset"] for r in rows}
    assert by_queue == {("broker-a", 0): 0, ("broker-a", 1): 0, ("broker-b", 0): 0, ("broker-b", 1): 1}


def test_delete_topic_removes_it_from_the_brokers_and_the_nameserver(cluster):
    topic = unique("t_delete")
    create_topic(cluster, topic)
    lines = ok("deleteTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic).stdout.splitlines()
    assert lines == [
        f"delete topic [{topic}] from cluster [{CLUSTER}] success.",
        f"delete topic [{topic}] from NameServer success.",
    ]
    assert topic not in ok_json("topicList", "-n", cluster.namesrv_addr)
    result = mqctl("topicRoute", "-n", cluster.namesrv_addr, "-t", topic)
    assert result.exit_code == 1


def test_route_of_an_unknown_topic_is_one_line_with_a_hint(cluster):
    result = mqctl("topicRoute", "-n", cluster.namesrv_addr, "-t", "no_such_topic_here")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip() == (
        "error: topic no_such_topic_here has no route on the nameserver; create it with "
        "`mqctl updateTopic -c <cluster> -t no_such_topic_here` or check the name with `mqctl topicList`"
    )


def test_update_topic_rejects_a_perm_other_than_2_4_or_6_as_a_usage_error(cluster):
    result = mqctl("updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", "t_bad_perm", "-p", "5")
    assert result.exit_code == 2
    assert "5 is not 2 (W), 4 (R) or 6 (RW)" in result.stderr


def test_update_and_delete_topic_with_json_print_one_parsable_document(cluster):
    topic = unique("t_json")
    created = ok_json("updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic, "-r", "2", "-w", "2")
    assert sorted(created["brokers"]) == sorted(cluster.addr(b) for b in ("broker-a", "broker-b"))
    assert created["topicConfig"] == {
        "topicName": topic,
        "readQueueNums": 2,
        "writeQueueNums": 2,
        "perm": 6,
        "order": False,
    }
    deleted = ok_json("deleteTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic)
    assert deleted["topic"] == topic and deleted["cluster"] == CLUSTER


def order_conf_on_namesrv(cluster, topic: str) -> str | None:
    """The nameserver's KV entry ORDER_TOPIC_CONFIG/<topic>, read straight from it."""
    from client.admin import ORDER_TOPIC_CONFIG, AdminClient

    async def read() -> str | None:
        async with AdminClient(cluster.namesrv_addr) as admin:
            return await admin.get_kv_config(ORDER_TOPIC_CONFIG, topic)

    return asyncio.run(read())


def test_update_topic_with_order_writes_the_order_conf_that_routes_carry(cluster):
    topic = unique("t_order")
    lines = ok(
        "updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic, "-r", "2", "-w", "2", "-o", "true"
    ).stdout.splitlines()
    assert "set cluster orderConf. isOrder=true, orderConf=[broker-a:2;broker-b:2]" in lines
    assert lines[-1].endswith("order=true]")
    assert order_conf_on_namesrv(cluster, topic) == "broker-a:2;broker-b:2"
    wait_until(
        lambda: (
            json.loads(ok("topicRoute", "-n", cluster.namesrv_addr, "-t", topic).stdout).get("orderTopicConf")
            == "broker-a:2;broker-b:2"
        ),
        ROUTE_TIMEOUT_S,
        f"the route of {topic} never carried its orderTopicConf",
    )

    # -b replaces that broker's part and keeps the others (mqadmin's createOrUpdateOrderConf)
    data = ok_json(
        "updateTopic",
        "-n",
        cluster.namesrv_addr,
        "-b",
        cluster.addr("broker-a"),
        "-t",
        topic,
        "-w",
        "4",
        "-r",
        "4",
        "-o",
        "true",
    )
    assert data["orderConf"] == "broker-a:4;broker-b:2"
    assert order_conf_on_namesrv(cluster, topic) == "broker-a:4;broker-b:2"

    ok("deleteTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic)
    assert order_conf_on_namesrv(cluster, topic) is None


def test_update_topic_with_order_on_an_address_that_is_no_broker_names_the_known_ones(cluster):
    result = mqctl("updateTopic", "-n", cluster.namesrv_addr, "-b", "127.0.0.1:1", "-t", "t_nowhere", "-o", "true")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: unknown broker 127.0.0.1:1: known brokers are 127.0.0.1:")
    assert result.stderr.strip().endswith("pass -b with an address from `mqctl clusterList`")
