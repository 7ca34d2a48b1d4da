"""Delay levels, consumer send-back and the %RETRY% send fallback on a real broker with short levels
("1s 1s 2s")."""

from __future__ import annotations

import time

import pytest

from broker.store.types import SCHEDULE_TOPIC
from remoting.codes import ResponseCode
from remoting.message_codec import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from tests.integration.broker.rpc import message
from harness.waiting import async_wait_until

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
        return (await client.pull("g-delay", topic, 1, 0)).messages

    msgs = await async_wait_until(delivered, 10, "the delayed message never reached DelayTopic queue 1")
    assert time.time() - sent_at >= 1.9
    [msg] = msgs
    assert (msg.body, msg.topic, msg.queue_id) == (b"later", topic, 1)
    assert msg.properties["KEYS"] == "k1" and msg.properties["UNIQ_KEY"] == "U1" and msg.tags == "tg"
    assert "DELAY" not in msg.properties


async def test_a_level_past_the_highest_is_clamped_to_it_and_zero_means_no_delay(client):
    """RocketMQ's rule, kept: a level past the highest is clamped to it (a Java consumer's %RETRY% fallback sends
    DELAY = 3 + reconsumeTimes, past the levels) and 0 is no delay. A negative level, which RocketMQ's parseInt
    took as "no delay" too, is refused (issue 22 item 8): no client writes one, and 0 says it."""
    topic = "DelayClampTopic"
    await client.create_topic(topic, queues=1)
    assert (await client.send(topic, 0, [message(b"0", DELAY="0")])).code == ResponseCode.SUCCESS
    negative = await client.send(topic, 0, [message(b"-1", DELAY="-1")])
    assert negative.code == ResponseCode.MESSAGE_ILLEGAL and "send a delay level: 0 (no delay)" in negative.remark
    assert [m.body for m in (await client.pull("g-clamp", topic, 0, 0)).messages] == [b"0"]
    sent_at = time.time()
    assert (await client.send(topic, 0, [message(b"19", DELAY="19")])).code == ResponseCode.SUCCESS

    async def delivered():
        return (await client.pull("g-clamp", topic, 0, 1)).messages

    [msg] = await async_wait_until(delivered, 10, "the clamped message was never delivered")
    assert msg.body == b"19" and time.time() - sent_at >= 1.9  # the highest of "1s 1s 2s"


async def test_a_batch_with_delayed_messages_schedules_each_and_stores_the_rest_at_once(client):
    topic = "DelayBatchTopic"
    await client.create_topic(topic, queues=1)
    resp = await client.send(topic, 0, [message(b"now"), message(b"later", DELAY="1"), message(b"now too")])
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in (await client.pull("g-dbatch", topic, 0, 0)).messages] == [b"now", b"now too"]

    async def delivered():
        return (await client.pull("g-dbatch", topic, 0, 2)).messages

    [later] = await async_wait_until(delivered, 10, "the delayed message of the batch never arrived")
    assert later.body == b"later"


async def test_a_message_sent_back_goes_through_retry_and_ends_in_the_dlq_after_max_reconsumes(client):
    topic, group = "RetrySourceTopic", "g-retry"
    await client.create_topic(topic, queues=1)
    await client.send(topic, 0, [message(b"poison", KEYS="bad")])
    [original] = (await client.pull(group, topic, 0, 0)).messages

    async def send_back(phy: int) -> None:
        ack = await client.send_back(group, phy, origin_topic=topic, max_reconsume_times=2)
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
    assert (await client.topic_configs())[dlq]["perm"] == 2  # write only, like RocketMQ
    denied = await client.pull(group, dlq, 0, 0)
    assert denied.code == ResponseCode.NO_PERMISSION
    await client.create_topic(dlq, queues=1, perm=6)  # an operator opens it to inspect
    [dead] = (await client.pull(group, dlq, 0, 0)).messages
    assert dead.body == b"poison" and dead.reconsume_times == 3
    assert dead.properties[PROPERTY_RETRY_TOPIC] == topic
    assert "DELAY" not in dead.properties


async def test_send_back_of_an_offset_with_no_message_says_so(client):
    ack = await client.send_back("g-retry-bad", 10**12)
    assert ack.code == ResponseCode.INVALID_PARAMETER and "can not find message by the offset" in ack.remark


async def test_a_consumers_fallback_send_to_its_retry_topic_is_delayed_and_goes_to_the_dlq_when_exhausted(client):
    """Java and Go consumers send to %RETRY%<group> themselves when CONSUMER_SEND_MSG_BACK failed."""
    group = "g-fallback"
    retry, dlq = f"%RETRY%{group}", f"%DLQ%{group}"
    resp = await client.send(retry, -1, [message(b"again", DELAY="1", RETRY_TOPIC="Orig")], reconsume_times=1)
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    async def retried():
        return (await client.pull(group, retry, 0, 0)).messages

    [msg] = await async_wait_until(retried, 10, "the fallback retry never arrived")
    assert (msg.body, msg.reconsume_times) == (b"again", 1)
    over = await client.send(retry, 0, [message(b"dead", DELAY="1")], reconsume_times=16, max_reconsume_times=16)
    assert over.code == ResponseCode.SUCCESS and over.ext["queueId"] == "0"
    await client.create_topic(dlq, queues=1, perm=6)
    [dead] = (await client.pull(group, dlq, 0, 0)).messages
    assert dead.body == b"dead" and "DELAY" not in dead.properties


async def test_producers_cannot_send_to_the_schedule_topic(client):
    resp = await client.send(SCHEDULE_TOPIC, 0, [message(b"x")])
    assert resp.code == ResponseCode.NO_PERMISSION and "forbidden" in resp.remark
