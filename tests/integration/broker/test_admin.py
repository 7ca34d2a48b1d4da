"""The admin service against a real broker: topics, groups, metadata tables, stats, runtime info, config."""

from __future__ import annotations

import pytest

from remoting.codes import ResponseCode as RC
from remoting.pb import admin_pb2, broker_pb2
from tests.integration.broker.rpc import group_config, message

pytestmark = pytest.mark.integration


async def test_a_disabled_group_is_refused_pulls_until_it_is_enabled_again(client):
    await client.create_topic("GroupTopic", queues=1)
    assert (
        await client.admin.UpdateAndCreateSubscriptionGroup(group_config("g-admin", consume_enable=False))
    ).code == 0
    assert (await client.pull("g-admin", "GroupTopic", 0, 0)).code == RC.NO_PERMISSION
    assert (await client.admin.UpdateAndCreateSubscriptionGroup(group_config("g-admin"))).code == 0
    assert (await client.pull("g-admin", "GroupTopic", 0, 0)).code == RC.PULL_NOT_FOUND
    before = await client.admin.GetAllSubscriptionGroupConfig(admin_pb2.Empty())
    assert "g-admin" in {g.group_name for g in before.groups}
    ack = await client.admin.DeleteSubscriptionGroup(admin_pb2.DeleteSubscriptionGroupRequest(group_name="g-admin"))
    assert ack.code == 0
    after = await client.admin.GetAllSubscriptionGroupConfig(admin_pb2.Empty())
    assert "g-admin" not in {g.group_name for g in after.groups}
    assert after.data_version.counter > before.data_version.counter


async def test_deleting_a_topic_drops_its_queues_and_consumer_offsets(client):
    await client.create_topic("DoomedTopic", queues=1)
    await client.send("DoomedTopic", 0, [message(b"x")])
    await client.commit_offset("g-doomed", "DoomedTopic", 0, 1)
    ack = await client.admin.DeleteTopic(admin_pb2.DeleteTopicRequest(topic="DoomedTopic"))
    assert ack.code == 0, ack.remark
    offsets = await client.admin.GetAllConsumerOffset(admin_pb2.Empty())
    assert "DoomedTopic@g-doomed" not in offsets.offset_table
    queue = await client.msg.GetQueueOffsets(broker_pb2.GetQueueOffsetsRequest(topic="DoomedTopic", queue_id=0))
    assert (queue.min_offset, queue.max_offset) == (0, 0)
    again = await client.admin.DeleteTopic(admin_pb2.DeleteTopicRequest(topic="DoomedTopic"))
    assert again.code == RC.TOPIC_NOT_EXIST


async def test_consume_and_topic_stats_show_broker_and_consumer_offsets(client):
    await client.create_topic("StatsTopic", queues=2)
    await client.send("StatsTopic", 1, [message(b"s%d" % i) for i in range(10)])
    await client.commit_offset("g-stats", "StatsTopic", 1, 4)
    stats = await client.admin.GetConsumeStats(admin_pb2.GetConsumeStatsRequest(consumer_group="g-stats"))
    assert stats.code == 0
    q1 = next(q for q in stats.queues if q.topic == "StatsTopic" and q.queue_id == 1)
    assert (q1.broker_offset, q1.consumer_offset) == (10, 4) and q1.last_timestamp > 0
    topic = await client.admin.GetTopicStats(admin_pb2.GetTopicStatsRequest(topic="StatsTopic"))
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in topic.queues] == [(0, 0, 0), (1, 0, 10)]
    assert topic.queues[1].last_update_timestamp > 0 and topic.broker_name == "broker-a"
    missing = await client.admin.GetTopicStats(admin_pb2.GetTopicStatsRequest(topic="NoStatsTopic"))
    assert missing.code == RC.TOPIC_NOT_EXIST


async def test_runtime_info_config_and_ha_status_describe_the_broker(client, master):
    before = int((await client.runtime_info())["msgPutTotal"])
    await client.send("InfoTopic", 0, [message(b"a"), message(b"b")])
    info = await client.runtime_info()
    assert int(info["msgPutTotal"]) == before + 2
    assert info["brokerRole"] == "ASYNC_MASTER" and info["brokerAddr"] == master.addr
    assert info["haServerAddr"] == master.ha_addr and int(info["bootTimestamp"]) > 0
    assert info["brokerVersionDesc"].startswith("pyrmq ")
    config = await client.admin.GetBrokerConfig(admin_pb2.Empty())
    assert config.table["brokerName"] == "broker-a" and config.table["messageDelayLevel"] == "1s 1s 2s"
    assert config.table["listenPort"] == str(master.port)
    ha = await client.admin.GetHAStatus(admin_pb2.Empty())
    assert ha.role == "ASYNC_MASTER" and ha.commitlog_max_offset > ha.commitlog_min_offset >= 0


async def test_heartbeats_list_consumers_sorted_and_unregister_removes_them(client):
    def hb(client_id: str) -> broker_pb2.HeartbeatRequest:
        return broker_pb2.HeartbeatRequest(
            client_id=client_id,
            consumers=[
                broker_pb2.ConsumerData(
                    group_name="g-hb", subscriptions=[broker_pb2.SubscriptionData(topic="HbTopic", sub_string="*")]
                )
            ],
        )

    for cid in ("c-2", "c-1", "c-3"):
        assert (await client.msg.Heartbeat(hb(cid))).code == 0
    ids = await client.msg.GetConsumerIdList(broker_pb2.GetConsumerIdListRequest(consumer_group="g-hb"))
    assert list(ids.consumer_ids) == ["c-1", "c-2", "c-3"]
    await client.msg.UnregisterClient(broker_pb2.UnregisterClientRequest(client_id="c-2", consumer_group="g-hb"))
    ids = await client.msg.GetConsumerIdList(broker_pb2.GetConsumerIdListRequest(consumer_group="g-hb"))
    assert list(ids.consumer_ids) == ["c-1", "c-3"]
    topics = await client.admin.GetAllTopicConfig(admin_pb2.Empty())
    assert "%RETRY%g-hb" in {t.topic_name for t in topics.topic_configs}  # created on heartbeat


async def test_view_message_returns_the_record_at_a_physical_offset(client):
    resp = await client.send("ViewTopic", 0, [message(b"look at me")])
    view = await client.msg.ViewMessage(broker_pb2.ViewMessageRequest(physical_offset=resp.physical_offset))
    assert view.code == 0 and b"look at me" in view.record
    bad = await client.msg.ViewMessage(broker_pb2.ViewMessageRequest(physical_offset=resp.physical_offset + 3))
    assert bad.code == RC.QUERY_NOT_FOUND
