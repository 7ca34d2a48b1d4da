"""Every bad input gets its own code and a remark saying what to fix (reliability.md §7 B-MSG / B-CONS /
B-ADMIN), and the broker keeps serving afterwards."""

from __future__ import annotations

import pytest

from remoting.codes import ResponseCode as RC
from remoting.pb import admin_pb2, broker_pb2, common_pb2
from tests.integration.broker.rpc import message

pytestmark = pytest.mark.integration

MAX_BODY = 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("topic", "queue_id", "messages", "code", "remark_part"),
    [
        ("BadT", 0, [], RC.INVALID_PARAMETER, "no message"),
        ("BadT", 0, [message(b"")], RC.MESSAGE_ILLEGAL, "empty body"),
        ("BadT", 0, [message(b"x" * (MAX_BODY + 1))], RC.MESSAGE_ILLEGAL, "maxMessageSize"),
        ("BadT", 0, [message(b"x", k="v\x01w")], RC.MESSAGE_ILLEGAL, "separators"),
        ("BadT", 0, [message(b"x", big="v" * 40_000)], RC.MESSAGE_ILLEGAL, "32767"),
        ("BadT", 0, [message(b"x", DELAY="-1")], RC.MESSAGE_ILLEGAL, "delay level"),
        ("BadT", 0, [message(b"x", DELAY="19")], RC.MESSAGE_ILLEGAL, "delay level"),
        ("T" * 128, 0, [message(b"x")], RC.MESSAGE_ILLEGAL, "limit is 127"),
        ("../../../fuzz2019", 0, [message(b"x")], RC.MESSAGE_ILLEGAL, "letters, digits"),
        ("has space", 0, [message(b"x")], RC.MESSAGE_ILLEGAL, "letters, digits"),
        ("", 0, [message(b"x")], RC.MESSAGE_ILLEGAL, "empty"),
        ("SCHEDULE_TOPIC_XXXX", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("RMQ_SYS_TRANS_HALF_TOPIC", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("rmq_sys_anything", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("TBW102", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("%RETRY%g", 0, [message(b"x")], RC.NO_PERMISSION, "ConsumerSendMsgBack"),
        ("%DLQ%g", 0, [message(b"x")], RC.NO_PERMISSION, "ConsumerSendMsgBack"),
        ("BadT", -1, [message(b"x")], RC.INVALID_PARAMETER, "0..3"),
        ("BadT", 4, [message(b"x")], RC.INVALID_PARAMETER, "0..3"),
        ("BadT", 2**31 - 1, [message(b"x")], RC.INVALID_PARAMETER, "out of range"),
    ],
)
async def test_a_bad_send_is_refused_with_its_code_and_a_hint(client, topic, queue_id, messages, code, remark_part):
    await client.create_topic("BadT", queues=4)
    resp = await client.send(topic, queue_id, messages)
    assert (resp.code, resp.code and remark_part in resp.remark) == (code, True), resp.remark


async def test_a_body_of_exactly_max_message_size_is_accepted(client):
    resp = await client.send("BigBodyTopic", 0, [message(b"x" * MAX_BODY)])
    assert resp.code == RC.SUCCESS, resp.remark


async def test_an_auto_created_topic_gets_the_requested_queue_count_and_appears_in_the_topic_table(client):
    resp = await client.send("AutoTopic", 5, [message(b"x")], default_topic_queue_nums=6)
    assert resp.code == RC.SUCCESS, resp.remark
    topics = await client.admin.GetAllTopicConfig(admin_pb2.Empty(), timeout=10)
    cfg = {t.topic_name: t for t in topics.topic_configs}["AutoTopic"]
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (6, 6, 6)


async def test_a_read_only_topic_refuses_sends_and_a_write_only_topic_refuses_pulls(client):
    await client.create_topic("ReadOnlyTopic", queues=1, perm=4)
    resp = await client.send("ReadOnlyTopic", 0, [message(b"x")])
    assert resp.code == RC.NO_PERMISSION and "not writable" in resp.remark
    await client.create_topic("WriteOnlyTopic", queues=1, perm=2)
    pulled = await client.pull("g-perm", "WriteOnlyTopic", 0, 0)
    assert pulled.code == RC.NO_PERMISSION and "not readable" in pulled.response.remark


@pytest.mark.parametrize(
    ("group", "topic", "queue_id", "max_nums", "subscription", "code", "remark_part"),
    [
        ("", "PullBad", 0, 32, "*", RC.INVALID_PARAMETER, "group"),
        ("g" * 121, "PullBad", 0, 32, "*", RC.INVALID_PARAMETER, "limit is 120"),
        ("g-ok", "NoSuchTopic", 0, 32, "*", RC.TOPIC_NOT_EXIST, "does not exist"),
        ("g-ok", "PullBad", 9, 32, "*", RC.INVALID_PARAMETER, "0..1"),
        ("g-ok", "PullBad", -1, 32, "*", RC.INVALID_PARAMETER, "out of range"),
        ("g-ok", "PullBad", 0, 0, "*", RC.INVALID_PARAMETER, "max_msg_nums"),
        ("g-ok", "PullBad", 0, 32, "||", RC.SUBSCRIPTION_PARSE_FAILED, "names no tag"),
    ],
)
async def test_a_bad_pull_is_refused_with_its_code_and_a_hint(
    client, group, topic, queue_id, max_nums, subscription, code, remark_part
):
    await client.create_topic("PullBad", queues=2)
    got = await client.pull(group, topic, queue_id, 0, max_nums, subscription=subscription)
    assert got.code == code and remark_part in got.response.remark, got.response.remark


async def test_pulls_with_negative_or_huge_offsets_are_told_where_to_continue(client):
    await client.create_topic("OffsetEdge", queues=1)
    await client.send("OffsetEdge", 0, [message(b"a"), message(b"b")])
    for offset in (-1, 2**63 - 1):
        got = await client.pull("g-edge2", "OffsetEdge", 0, offset)
        assert got.code == RC.PULL_OFFSET_MOVED, got.response.remark
        assert 0 <= got.response.next_begin_offset <= 2
    huge = await client.pull("g-edge2", "OffsetEdge", 0, 0, max_nums=10**6)
    assert huge.code == RC.SUCCESS and len(huge.messages) == 2


async def test_a_negative_offset_commit_is_refused(client):
    ack = await client.commit_offset("g-neg", "OffsetEdge", 0, -5)
    assert ack.code == RC.INVALID_PARAMETER and "negative" in ack.remark


@pytest.mark.parametrize(
    ("config", "code", "remark_part"),
    [
        (
            common_pb2.TopicConfig(topic_name="../etc", read_queue_nums=1, write_queue_nums=1, perm=6),
            RC.INVALID_PARAMETER,
            "letters",
        ),
        (
            common_pb2.TopicConfig(topic_name="SCHEDULE_TOPIC_XXXX", read_queue_nums=1, write_queue_nums=1, perm=6),
            RC.NO_PERMISSION,
            "system topic",
        ),
        (
            common_pb2.TopicConfig(topic_name="PermTopic", read_queue_nums=1, write_queue_nums=1, perm=9),
            RC.INVALID_PARAMETER,
            "perm 9",
        ),
        (
            common_pb2.TopicConfig(topic_name="ZeroQueues", read_queue_nums=0, write_queue_nums=1, perm=6),
            RC.INVALID_PARAMETER,
            "read_queue_nums",
        ),
    ],
)
async def test_bad_topic_admin_requests_are_refused(client, config, code, remark_part):
    ack = await client.admin.UpdateAndCreateTopic(config, timeout=10)
    assert ack.code == code and remark_part in ack.remark, ack.remark


async def test_deleting_a_system_topic_is_refused(client):
    ack = await client.admin.DeleteTopic(admin_pb2.DeleteTopicRequest(topic="SCHEDULE_TOPIC_XXXX"), timeout=10)
    assert ack.code == RC.NO_PERMISSION


async def test_a_heartbeat_without_client_id_is_refused(client):
    ack = await client.msg.Heartbeat(broker_pb2.HeartbeatRequest(client_id=""), timeout=10)
    assert ack.code == RC.INVALID_PARAMETER


async def test_the_broker_still_serves_after_all_the_bad_inputs(client):
    resp = await client.send("AfterBadTopic", 0, [message(b"fine")])
    assert resp.code == RC.SUCCESS
