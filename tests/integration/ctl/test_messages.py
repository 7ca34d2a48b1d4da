"""sendMessage, consumeMessage and consumerProgress end to end through real brokers."""

from __future__ import annotations

import pytest

from tests.integration.ctl.cli import CLUSTER, mqctl, ok, ok_json, unique
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ROUTE_TIMEOUT_S = 10.0
REPLICATION_TIMEOUT_S = 20.0


def routed_topic(cluster, queues: int = 2) -> str:
    topic = unique("t_msg")
    ok("updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic, "-r", str(queues), "-w", str(queues))
    wait_until(
        lambda: mqctl("topicRoute", "-n", cluster.namesrv_addr, "-t", topic).exit_code == 0,
        ROUTE_TIMEOUT_S,
        f"route of {topic} never appeared",
    )
    return topic


def test_send_message_prints_broker_queue_result_and_msg_id(cluster):
    topic = routed_topic(cluster)
    lines = ok(
        "sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "hello", "-b", "broker-b", "-i", "1"
    ).stdout.splitlines()
    assert lines[0].split("  ")[0:1] == ["#Broker Name"]
    assert [c.strip() for c in lines[0].split("#") if c.strip()] == ["Broker Name", "QID", "Send Result", "MsgId"]
    broker, qid, result, msg_id = lines[1].split()
    assert (broker, qid, result) == ("broker-b", "1", "SEND_OK")
    assert len(msg_id) == 32


def test_a_sent_message_is_consumed_with_its_body_tags_and_keys(cluster):
    topic = routed_topic(cluster)
    sent = ok_json(
        "sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "body of the message", "-k", "k1 k2", "-c", "TagA"
    )[0]
    group = unique("g_consume")
    consumed = ok_json(
        "consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-g", group, "-c", "1", "--timeout", "5"
    )
    assert len(consumed) == 1
    msg = consumed[0]
    assert (msg["body"], msg["tags"], msg["keys"], msg["msgId"]) == (
        "body of the message",
        "TagA",
        "k1 k2",
        sent["msgId"],
    )
    assert (msg["brokerName"], msg["queueId"]) == (sent["brokerName"], sent["queueId"])


def test_consume_message_prints_a_table_and_stops_when_nothing_more_arrives(cluster):
    topic = routed_topic(cluster)
    for body in ("first", "second", "third"):
        ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", body, "-b", "broker-a", "-i", "0")
    out = ok(
        "consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-g", unique("g_table"), "--timeout", "1"
    ).stdout.splitlines()
    assert out[0].startswith("#Broker Name")
    bodies = [line.split()[-1] for line in out[1:4]]
    assert bodies == ["first", "second", "third"]
    assert out[-1].startswith("consumed 3 message(s)")


def test_consumer_progress_after_a_consume_shows_diff_zero(cluster):
    topic = routed_topic(cluster)
    for i in range(4):
        ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", f"m{i}")
    group = unique("g_progress")
    assert len(ok_json("consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-g", group, "--timeout", "1")) == 4

    progress = ok_json("consumerProgress", "-n", cluster.namesrv_addr, "-g", group, "-t", topic)
    assert progress["diffTotal"] == 0
    assert sum(q["brokerOffset"] for q in progress["queues"]) == 4
    assert all(q["consumerOffset"] == q["brokerOffset"] for q in progress["queues"])

    lines = ok("consumerProgress", "-n", cluster.namesrv_addr, "-g", group).stdout.splitlines()
    assert [c.strip() for c in lines[0].split("#") if c.strip()] == [
        "Topic",
        "Broker Name",
        "QID",
        "Broker Offset",
        "Consumer Offset",
        "Diff",
        "LastTime",
    ]
    assert lines[-1] == "Diff Total: 0"


def test_consumer_progress_counts_messages_sent_after_the_consume_as_diff(cluster):
    topic = routed_topic(cluster, queues=1)
    group = unique("g_lag")
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "seen", "-b", "broker-a")
    ok("consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-g", group, "--timeout", "1")
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "unseen", "-b", "broker-a")
    progress = ok_json("consumerProgress", "-n", cluster.namesrv_addr, "-g", group)
    assert progress["diffTotal"] == 1


def test_consume_from_the_slave_returns_the_replicated_message(cluster):
    topic = routed_topic(cluster, queues=1)
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "copied", "-b", "broker-b")

    def from_slave():
        rows = ok_json(
            "consumeMessage",
            "-n",
            cluster.namesrv_addr,
            "-t",
            topic,
            "-b",
            "broker-b",
            "-i",
            "0",
            "-o",
            "0",
            "--from-slave",
            "--timeout",
            "0.5",
        )
        return rows

    rows = wait_until(from_slave, REPLICATION_TIMEOUT_S, "the slave never served the replicated message")
    assert [r["body"] for r in rows] == ["copied"]


def test_send_to_an_unknown_broker_names_the_known_ones(cluster):
    topic = routed_topic(cluster)
    result = mqctl("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "x", "-b", "broker-x")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: unknown broker broker-x: known brokers are broker-a, broker-b; "
        "pass -b with a broker name of the topic's route"
    )


def test_consumer_progress_without_a_group_lists_each_group_with_its_diff_total(cluster):
    topic = routed_topic(cluster, queues=1)
    group = unique("g_all")
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "a", "-b", "broker-b")
    ok("consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-g", group, "--timeout", "1")
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "b", "-b", "broker-b")
    rows = {r["group"]: r for r in ok_json("consumerProgress", "-n", cluster.namesrv_addr)}
    assert rows[group]["diffTotal"] == 1
    header = ok("consumerProgress", "-n", cluster.namesrv_addr).stdout.splitlines()[0]
    assert header.split("  ")[0] == "#Group"


def test_consumer_progress_of_a_group_that_never_consumed_says_what_to_do(cluster):
    group = unique("g_never")
    result = mqctl("consumerProgress", "-n", cluster.namesrv_addr, "-g", group)
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"error: no consume progress for group {group}; the group has committed no offset yet; "
        "consume first (mqctl consumeMessage -g ...) or check the name"
    )
