"""The admin answers' bodies as brokers write them (fastjson's bare and inline-object keys included) read into
AdminClient's dataclasses; the HA status as broker/ha/status.py writes it reads back field for field."""

from __future__ import annotations

import pytest

from broker.ha.status import HAStatus as BrokerHAStatus
from broker.ha.status import MasterLinkStatus, SlaveLinkStatus
from client import admin_bodies as bodies
from remoting import fastjson


def test_topic_stats_read_the_inline_message_queue_keys_a_java_broker_writes():
    body = (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"lastUpdateTimestamp":1700000000000,"maxOffset":7,"minOffset":2},'
        b'{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0}}}'
    )
    stats = bodies.parse_topic_stats(body, "T")
    assert stats.broker_name == "broker-a"
    assert [(q.queue_id, q.min_offset, q.max_offset, q.last_update_timestamp) for q in stats.queues] == [
        (0, 0, 0, 0),
        (1, 2, 7, 1700000000000),
    ]


def test_consume_stats_keep_topic_broker_and_queue_of_each_key():
    key = fastjson.FrozenObject.of({"brokerName": "b", "queueId": 3, "topic": "T"})
    body = fastjson.dumps(
        {"consumeTps": 1.5, "offsetTable": {key: {"brokerOffset": 10, "consumerOffset": 4, "lastTimestamp": 9}}}
    )
    stats = bodies.parse_consume_stats(body, "g")
    assert stats.consume_tps == 1.5
    assert stats.queues == [bodies.QueueConsumeStat("T", "b", 3, 10, 4, 9)]


def test_all_consumer_offsets_accept_bare_queue_ids_and_name_the_groups():
    body = b'{"offsetTable":{"T@g1":{0:12,1:3},"%RETRY%g2@g2":{0:0}},"resetVersion":{"T@g1":55}}'
    table = bodies.parse_all_consumer_offsets(body)
    assert table.offset_table["T@g1"] == bodies.QueueOffsets({0: 12, 1: 3}, 55)
    assert table.offset_table["%RETRY%g2@g2"].reset_version == 0
    assert table.groups() == {"g1", "g2"}


def test_topic_and_group_configs_take_rocketmq_defaults_for_missing_fields():
    topics = bodies.parse_all_topic_config(
        b'{"dataVersion":{"counter":3,"timestamp":9},"topicConfigTable":{"B":{"topicName":"B","perm":4},'
        b'"A":{"topicName":"A","readQueueNums":2,"writeQueueNums":2,"order":true}}}'
    )
    assert topics.data_version == bodies.DataVersion(9, 3, 0)
    assert [(t.topic_name, t.read_queue_nums, t.perm, t.order) for t in topics.topic_configs] == [
        ("A", 2, 6, True),
        ("B", 16, 4, False),
    ]
    groups = bodies.parse_all_subscription_groups(b'{"subscriptionGroupTable":{"g":{"groupName":"g","brokerId":1}}}')
    assert groups.groups == [bodies.SubscriptionGroupConfig("g", broker_id=1)]


def test_a_subscription_group_config_round_trips_through_its_request_body():
    cfg = bodies.SubscriptionGroupConfig(
        "g", consume_enable=False, retry_max_times=3, which_broker_when_consume_slowly=2
    )
    assert bodies.parse_subscription_group("g", fastjson.loads(fastjson.dumps(cfg.to_json()))) == cfg


def test_broker_config_is_read_from_properties_text():
    assert bodies.parse_properties(b"# comment\nbrokerName=broker-a\n\nbrokerRole = SLAVE\nempty=\n") == {
        "brokerName": "broker-a",
        "brokerRole": "SLAVE",
        "empty": "",
    }


def test_consumer_connection_lists_clients_and_subscriptions():
    body = (
        b'{"connectionSet":[{"clientAddr":"127.0.0.1:5000","clientId":"127.0.0.1@1#2","language":"CPP","version":63}],'
        b'"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",'
        b'"subscriptionTable":{"T":{"subString":"a || b","topic":"T"},"%RETRY%g":{"subString":"*"}}}'
    )
    conn = bodies.parse_consumer_connection(body, "g")
    assert conn.connections == [bodies.Connection("127.0.0.1@1#2", "127.0.0.1:5000", "CPP", 63)]
    assert conn.subscriptions == {"%RETRY%g": "*", "T": "a || b"}
    assert (conn.consume_type, conn.message_model) == ("CONSUME_PASSIVELY", "CLUSTERING")


def test_ha_status_of_a_master_reads_back_what_the_broker_writes():
    link = SlaveLinkStatus("127.0.0.1:5001", 1, 900, 100, "FALL_BEHIND", 0, 900, 10, 1234)
    written = BrokerHAStatus("SYNC_MASTER", 1000, 0, (link,))
    status = bodies.parse_ha_status(fastjson.dumps(written.to_json()))
    assert (status.role, status.commitlog_max_offset, status.in_sync_slave_count) == ("SYNC_MASTER", 1000, 0)
    assert status.slaves == [bodies.SlaveConnection("127.0.0.1:5001", 1, 900, 100, "FALL_BEHIND", 0, 900, 1234)]


def test_ha_status_of_a_slave_reads_its_link_to_the_master():
    client = MasterLinkStatus("10.0.0.1:10912", True, 500, 11, 12, 480, 0)
    status = bodies.parse_ha_status(fastjson.dumps(BrokerHAStatus("SLAVE", 500, 20, (), client).to_json()))
    assert (status.role, status.commitlog_max_offset, status.commitlog_min_offset) == ("SLAVE", 500, 20)
    assert (status.master_ha_addr, status.connected, status.replicated_bytes) == ("10.0.0.1:10912", True, 480)
    assert (status.last_read_timestamp, status.last_write_timestamp, status.slaves) == (11, 12, [])


def test_a_rocketmq5_ha_answer_without_pyrmq_fields_still_reads():
    body = (
        b'{"haClientRuntimeInfo":{"isActivated":false,"masterAddr":"","maxOffset":0},'
        b'"haConnectionInfo":[{"addr":"s:1","diff":0,"inSync":true,"slaveAckOffset":64,"transferFromWhere":0}],'
        b'"inSyncSlaveNums":1,"master":true,"masterCommitLogMaxOffset":64}'
    )
    status = bodies.parse_ha_status(body)
    assert (status.role, status.commitlog_max_offset) == ("MASTER", 64)
    assert [(s.slave_addr, s.state, s.lag_bytes) for s in status.slaves] == [("s:1", "OK", 0)]


@pytest.mark.parametrize(
    ("parse", "body", "words"),
    [
        (bodies.parse_all_topic_config, b"[1,2]", "a JSON list, not an object"),
        (bodies.parse_all_topic_config, b"{nope", "not JSON"),
        (lambda b: bodies.parse_topic_stats(b, "T"), b'{"offsetTable":{"q0":{}}}', "is not a MessageQueue"),
        (bodies.parse_ha_status, b'{"haConnectionInfo":[1]}', "other than objects"),
    ],
)
def test_a_body_of_the_wrong_shape_says_which_request_and_what_was_wrong(parse, body, words):
    with pytest.raises(bodies.AdminBodyError) as err:
        parse(body)
    assert words in str(err.value)
