"""sendMessage, consumeMessage and consumerProgress end to end through real brokers."""

from __future__ import annotations

import json

import pytest

from tests.integration.ctl.cli import ROUTE_TIMEOUT_S, fails, flat, mqctl, ok, ok_json, routed_topic, unique
from harness.waiting import wait_until

pytestmark = pytest.mark.integration

REPLICATION_TIMEOUT_S = 20.0


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
    assert out[-2].startswith("consumed 3 message(s)")


def test_consume_message_twice_prints_nothing_new_then_again_with_from_beginning(cluster):
    topic = routed_topic(cluster)
    for body in ("first", "second"):
        ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", body, "-b", "broker-a", "-i", "0")
    group = unique("g_again")
    args = ("consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "--group", group, "--timeout", "0.5")

    def bodies(lines: list[str]) -> list[str]:
        return [line.split()[-1] for line in lines if line and not line.startswith(("#", "consumed", "to read"))]

    first = ok(*args).stdout.splitlines()
    assert bodies(first) == ["first", "second"]
    assert first[-2:] == [
        f"consumed 2 message(s) from {topic} as group {group}, which committed its offsets: its next run starts "
        "after them",
        f"to read again: --from-beginning (group {group}'s offsets stay), or another group: --group <name>",
    ]
    second = ok(*args).stdout.splitlines()
    assert bodies(second) == []
    assert second[-2].startswith(f"consumed 0 message(s) from {topic} as group {group}")
    assert second[-1].startswith("to read again: --from-beginning")

    for _ in range(2):  # reading from the beginning leaves the group where it was, so it can be repeated
        again = ok(*args, "--from-beginning").stdout.splitlines()
        assert bodies(again) == ["first", "second"]
        assert again[-1] == (
            f"consumed 2 message(s) from {topic} from the beginning; group {group}'s offsets are unchanged"
        )
    progress = ok_json("consumerProgress", "-n", cluster.namesrv_addr, "-g", group, "-t", topic)
    assert progress["diffTotal"] == 0
    queue_0 = [q for q in progress["queues"] if (q["brokerName"], q["queueId"]) == ("broker-a", 0)]
    assert [q["consumerOffset"] for q in queue_0] == [2]


def test_from_beginning_and_an_offset_together_are_a_usage_error(cluster):
    topic = routed_topic(cluster)
    result = mqctl(
        "consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-b", "broker-a", "-i", "0", "-o", "0",
        "--from-beginning",
    )
    assert result.exit_code == 2
    assert "pass either -o <offset> or --from-beginning" in flat(result.stderr)


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
        "Inflight",
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
    assert fails("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "x", "-b", "broker-x") == (
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
    assert fails("consumerProgress", "-n", cluster.namesrv_addr, "-g", group) == (
        f"error: no consume progress for group {group}; the group has committed no offset yet; "
        "consume first (mqctl consumeMessage -g ...) or check the name"
    )


def test_query_msg_by_id_reads_the_message_from_the_store_host_inside_the_offset_msg_id(cluster):
    topic = routed_topic(cluster)
    sent = ok_json(
        "sendMessage",
        "-n",
        cluster.namesrv_addr,
        "-t",
        topic,
        "-p",
        "find me",
        "-k",
        "K1",
        "-c",
        "TagQ",
        "-b",
        "broker-b",
    )[0]
    assert len(sent["offsetMsgId"]) == 32
    lines = ok("queryMsgById", "-n", cluster.namesrv_addr, "-i", sent["offsetMsgId"]).stdout.splitlines()
    fields = {line[:20].strip(): line[21:] for line in lines}
    assert fields["OffsetID:"] == sent["offsetMsgId"]
    assert (fields["Topic:"], fields["Tags:"], fields["Keys:"]) == (topic, "[TagQ]", "[K1]")
    assert (fields["Queue ID:"], fields["Queue Offset:"]) == (str(sent["queueId"]), str(sent["queueOffset"]))
    assert fields["Message Body:"] == "find me"
    assert f"UNIQ_KEY={sent['msgId']}" in fields["Properties:"]
    assert fields["Store Host:"] == cluster.addr("broker-b")
    data = ok_json("queryMsgById", "-n", cluster.namesrv_addr, "-i", sent["offsetMsgId"].lower())
    assert (data["topic"], data["body"], data["properties"]["UNIQ_KEY"]) == (topic, "find me", sent["msgId"])


def test_query_msg_by_key_and_by_unique_key_find_messages_through_the_index_of_every_broker(cluster):
    topic = routed_topic(cluster)
    sent = [ok_json("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", f"body {i}", "-k", f"K-{i % 2} all",
                    "-b", name)[0]
            for i, name in enumerate(["broker-a", "broker-b", "broker-a", "broker-b"])]
    rows = ok_json("queryMsgByKey", "-n", cluster.namesrv_addr, "-t", topic, "-k", "all")
    assert sorted(r["msgId"] for r in rows) == sorted(s["msgId"] for s in sent)  # from both broker groups
    k1 = ok_json("queryMsgByKey", "-n", cluster.namesrv_addr, "-t", topic, "-k", "K-1")
    assert [r["msgId"] for r in k1] == [sent[3]["msgId"], sent[1]["msgId"]]  # newest first
    table = ok("queryMsgByKey", "-n", cluster.namesrv_addr, "-t", topic, "-k", "K-0").stdout
    assert "#Message ID" in table and sent[2]["msgId"] in table
    one = ok_json("queryMsgByUniqueKey", "-n", cluster.namesrv_addr, "-t", topic, "-i", sent[1]["msgId"])
    assert (one["msgId"], one["body"], one["queueOffset"]) == (sent[1]["msgId"], "body 1", sent[1]["queueOffset"])
    by_id = ok_json("queryMsgById", "-n", cluster.namesrv_addr, "-t", topic, "-i", sent[2]["msgId"])
    assert by_id["body"] == "body 2" and by_id["offsetMsgId"] == sent[2]["offsetMsgId"]
    missing = mqctl("queryMsgByKey", "-n", cluster.namesrv_addr, "-t", topic, "-k", "no-such-key")
    assert missing.exit_code == 1 and "CODE: 208" in missing.stderr and "but no message" in missing.stderr


def test_query_msg_by_id_with_a_client_msg_id_is_a_usage_error_that_says_which_id_to_pass(cluster):
    result = mqctl("queryMsgById", "-n", cluster.namesrv_addr, "-i", "not-an-offset-id")
    assert result.exit_code == 2
    assert "pass the offsetMsgId of a SendResult" in result.stderr and "with -t TOPIC" in result.stderr


async def _rocketmq_like_consumer(cluster, group: str, topic: str, commit: dict[int, int]):
    """A connection that behaves like a Java RocketMQ push consumer: HEART_BEAT with its HeartbeatData (language
    JAVA, no subscription group created beforehand), then UPDATE_CONSUMER_OFFSET per queue. Returns the client,
    whose open connection keeps the consumer registered."""
    from remoting.client import RemotingClient
    from remoting.codes import LanguageCode, RequestCode
    from remoting.frame_codec import RemotingCommand
    from tests.integration.broker.rpc import heartbeat_data

    java_version = 393  # MQVersion V4_9_0
    client_id = "127.0.0.1@4242#9876543210"
    subscriptions = {topic: "*", f"%RETRY%{group}": "*"}
    heartbeat = heartbeat_data(client_id, {group: subscriptions}, ["CLIENT_INNER_PRODUCER"], sub_version=1700000000000)
    client = RemotingClient(name="java-like")
    for name in ("broker-a", "broker-b"):
        cmd = RemotingCommand(
            RequestCode.HEART_BEAT, body=heartbeat, language=LanguageCode.JAVA, version=java_version
        )
        answer = await client.invoke(cluster.addr(name), cmd, 5.0)
        assert answer.code == 0, answer.remark
    for queue_id, offset in commit.items():
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
        cmd = RemotingCommand(
            RequestCode.UPDATE_CONSUMER_OFFSET, ext=ext, language=LanguageCode.JAVA, version=java_version
        )
        answer = await client.invoke(cluster.addr("broker-a"), cmd, 5.0)
        assert answer.code == 0, answer.remark
    return client, client_id


def test_a_rocketmq_client_that_only_heartbeats_and_commits_shows_in_progress_and_connection(cluster):
    import asyncio

    topic = routed_topic(cluster, queues=1)
    for body in ("one", "two", "three"):
        ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", body, "-b", "broker-a", "-i", "0")
    group = unique("g_java")

    async def scenario():
        client, client_id = await _rocketmq_like_consumer(cluster, group, topic, {0: 2})
        try:
            everyone = await asyncio.to_thread(ok_json, "consumerProgress", "-n", cluster.namesrv_addr)
            mine = await asyncio.to_thread(ok_json, "consumerProgress", "-n", cluster.namesrv_addr, "-g", group)
            conn = await asyncio.to_thread(ok_json, "consumerConnection", "-n", cluster.namesrv_addr, "-g", group)
            table = await asyncio.to_thread(ok, "consumerConnection", "-n", cluster.namesrv_addr, "-g", group)
        finally:
            await client.close()
        return client_id, everyone, mine, conn, table.stdout.splitlines()

    client_id, everyone, mine, conn, lines = asyncio.run(scenario())
    row = next(r for r in everyone if r["group"] == group)
    assert (row["count"], row["diffTotal"], row["consumeType"], row["messageModel"]) == (1, 1, "PUSH", "CLUSTERING")
    assert row["version"].startswith("JAVA")
    queue = next(q for q in mine["queues"] if q["topic"] == topic)
    assert (queue["brokerName"], queue["brokerOffset"], queue["consumerOffset"], queue["diff"]) == ("broker-a", 3, 2, 1)
    assert [c["clientId"] for c in conn["connections"]] == [client_id]
    assert conn["connections"][0]["language"] == "JAVA"
    assert {s["topic"]: s["subExpression"] for s in conn["subscriptions"]} == {topic: "*", f"%RETRY%{group}": "*"}
    assert lines[0].split() == ["#ClientId", "#ClientAddr", "#Language", "#Version"]
    assert "Below is subscription:" in lines
    assert "MessageModel: CLUSTERING" in lines


def test_consumer_connection_of_a_group_with_no_client_says_what_to_do(cluster):
    group = unique("g_offline")
    assert fails("consumerConnection", "-n", cluster.namesrv_addr, "-g", group) == (
        f"error: no consumer of group {group} is connected; start a consumer of the group, "
        "or check the name with `mqctl consumerProgress`"
    )


def test_send_message_with_a_count_spreads_over_the_queues_without_progress_on_a_pipe(cluster):
    topic = routed_topic(cluster)
    result = ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "many", "--count", "12")
    assert result.stderr == ""  # stderr is no terminal here: scripted output stays clean
    rows = result.stdout.splitlines()[1:]
    assert len(rows) == 12 and {row.split()[2] for row in rows} == {"SEND_OK"}
    queues = [(row.split()[0], row.split()[1]) for row in rows]
    assert sorted(set(queues)) == [("broker-a", "0"), ("broker-a", "1"), ("broker-b", "0"), ("broker-b", "1")]
    assert all(queues.count(q) == 3 for q in set(queues))  # one queue after the other
    consumed = ok_json("consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-g", unique("g_many"),
                       "--timeout", "0.5")
    assert len(consumed) == 12


def test_send_message_progress_is_shown_on_request(cluster):
    topic = routed_topic(cluster)
    result = ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "x", "--count", "5", "--progress",
                "--json")
    assert len(json.loads(result.stdout)) == 5
    assert result.stderr.splitlines()[-1] == f"sent 5/5 messages to {topic}"


def test_send_to_a_new_topic_creates_it_through_the_default_route(cluster):
    """RocketMQ's producer fallback: no route yet, so the send goes by TBW102's route and the broker (with
    autoCreateTopicEnable=true, the default) creates the topic and registers it."""
    topic = unique("t_new")
    result = mqctl("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "first", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "no route yet: sending by the default topic's (TBW102) route" in flat(result.stderr)
    [row] = json.loads(result.stdout)
    assert row["sendResult"] == "SEND_OK"
    route = wait_until(
        lambda: (r := mqctl("topicRoute", "-n", cluster.namesrv_addr, "-t", topic, "--json")).exit_code == 0 and r,
        ROUTE_TIMEOUT_S,
        f"the broker never registered {topic}",
    )
    brokers = {q["brokerName"] for q in json.loads(route.stdout)["queueDatas"]}
    assert row["brokerName"] in brokers
    again = mqctl("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "second")
    assert again.exit_code == 0 and "TBW102" not in again.stderr  # its own route now
