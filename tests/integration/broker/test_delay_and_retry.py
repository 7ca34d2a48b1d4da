"""Delay levels and consumer send-back on a real broker with short levels ("1s 1s 2s")."""

from __future__ import annotations

import time

import pytest

from broker.store.types import SCHEDULE_TOPIC
from remoting.codes import ResponseCode
from remoting.message_codec import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from remoting.pb import admin_pb2, broker_pb2
from tests.integration.broker.rpc import message
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration


async def test_a_delayed_message_is_delivered_to_its_topic_after_its_level_and_not_before(client):
    topic = "DelayTopic"
    await client.create_topic(topic, queues=2)
    sent_at = time.time()
    resp = await client.send(topic, 1, [message(b"later", DELAY="3", KEYS="k1", UNIQ_KEY="U1", TAGS="tg")])
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    early = await client.pull("g-delay", topic, 1, 0)
    assert early.code == ResponseCode.PULL_NOT_FOUND

    async def delivered():
        got = await client.pull("g-delay", topic, 1, 0)
        return got.messages

    msgs = await async_wait_until(delivered, 10, "the delayed message never reached DelayTopic queue 1")
    assert time.time() - sent_at >= 1.9
    [msg] = msgs
    assert (msg.body, msg.topic, msg.queue_id) == (b"later", topic, 1)
    assert msg.properties["KEYS"] == "k1" and msg.properties["UNIQ_KEY"] == "U1" and msg.tags == "tg"
    assert "DELAY" not in msg.properties


async def test_a_message_sent_back_goes_through_retry_and_ends_in_the_dlq_after_max_reconsumes(client):
    topic, group = "RetrySourceTopic", "g-retry"
    await client.create_topic(topic, queues=1)
    await client.send(topic, 0, [message(b"poison", KEYS="bad")])
    [original] = (await client.pull(group, topic, 0, 0)).messages

    async def send_back(phy: int) -> None:
        ack = await client.msg.ConsumerSendMsgBack(
            broker_pb2.ConsumerSendMsgBackRequest(
                consumer_group=group, physical_offset=phy, original_topic=topic, max_reconsume_times=2
            ),
            timeout=10,
        )
        assert ack.code == ResponseCode.SUCCESS, ack.remark

    retry_topic = f"%RETRY%{group}"
    current = original
    for next_offset, expected_reconsume in enumerate((1, 2)):
        await send_back(current.physical_offset)

        async def arrived(offset=next_offset):
            return (await client.pull(group, retry_topic, 0, offset)).messages

        [current] = await async_wait_until(arrived, 10, f"retry #{expected_reconsume} never arrived")
        assert current.body == b"poison" and current.reconsume_times == expected_reconsume
        assert current.properties[PROPERTY_RETRY_TOPIC] == topic
        assert current.properties[PROPERTY_ORIGIN_MESSAGE_ID] == original.offset_msg_id

    await send_back(current.physical_offset)  # third failure: over max_reconsume_times=2
    dlq = f"%DLQ%{group}"
    topics = await client.admin.GetAllTopicConfig(admin_pb2.Empty(), timeout=10)
    dlq_cfg = {t.topic_name: t for t in topics.topic_configs}[dlq]
    assert dlq_cfg.perm == 2  # write only, like RocketMQ: nobody consumes a DLQ by accident
    denied = await client.pull(group, dlq, 0, 0)
    assert denied.code == ResponseCode.NO_PERMISSION
    await client.create_topic(dlq, queues=1, perm=6)  # an operator opens it to inspect
    [dead] = (await client.pull(group, dlq, 0, 0)).messages
    assert dead.body == b"poison" and dead.reconsume_times == 3
    assert dead.properties[PROPERTY_RETRY_TOPIC] == topic
    assert "DELAY" not in dead.properties


async def test_producers_cannot_send_to_the_schedule_topic(client):
    resp = await client.send(SCHEDULE_TOPIC, 0, [message(b"x")])
    assert resp.code == ResponseCode.NO_PERMISSION and "forbidden" in resp.remark
