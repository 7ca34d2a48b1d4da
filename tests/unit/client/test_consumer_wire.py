"""What a PushConsumer puts on the wire, against the RemotingServer fake (tests/unit/client/fake_cluster.py):
its heartbeat, how it finds its start offset, the shape of its long-polling pulls, a rebalance on the broker's
NOTIFY_CONSUMER_IDS_CHANGED, the send-back of a failed message and its %RETRY% fallback, and its unregistration."""

from __future__ import annotations

import asyncio
import zlib

from client import ConsumeFromWhere, ConsumeStatus, PushConsumer
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.message_codec import string_to_properties
from remoting.message_headers import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from harness.waiting import async_wait_until
from tests.unit.client.fake_cluster import FakeCluster


def consumer(fake: FakeCluster, listener, **kw) -> PushConsumer:
    c = PushConsumer("G", fake.addr, suspend_ms=15_000, pull_retry_delay_s=0.2, local_retry_delay_s=0.2, **kw)
    c.subscribe("T", "A || B")
    c.register_message_listener(listener)
    return c


async def test_heartbeat_start_offset_and_pull_shape():
    async with FakeCluster() as fake:
        fake.topics.update({"T": 1, "%RETRY%G": 1})
        fake.max_offsets[("T", 0)] = 5
        async with consumer(fake, lambda msgs: ConsumeStatus.CONSUME_SUCCESS) as c:
            await async_wait_until(
                lambda: any(r.ext["topic"] == "T" for r in fake.of(RequestCode.PULL_MESSAGE)), 5, "a pull of T"
            )
            client_id = c.client_id
    [beat, *_] = fake.of(RequestCode.HEART_BEAT)
    data = fastjson.loads(beat.body)
    assert data["clientID"] == client_id and data["producerDataSet"] == []
    [cd] = data["consumerDataSet"]
    assert (cd["groupName"], cd["consumeType"], cd["messageModel"], cd["consumeFromWhere"]) == (
        "G",
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    subs = {s["topic"]: s for s in cd["subscriptionDataSet"]}
    assert subs["T"]["subString"] == "A || B" and subs["T"]["tagsSet"] == ["A", "B"]
    assert subs["T"]["codeSet"] == [65, 66]
    assert subs["%RETRY%G"]["subString"] == "*"  # a clustering consumer also subscribes its retry topic
    # no committed offset (22) -> CONSUME_FROM_LAST_OFFSET = the queue's max offset (30)
    assert [r.ext["topic"] for r in fake.of(RequestCode.QUERY_CONSUMER_OFFSET)].count("T") >= 1
    [max_q] = [r for r in fake.of(RequestCode.GET_MAX_OFFSET) if r.ext["topic"] == "T"]
    assert max_q.ext == {"topic": "T", "queueId": "0"}
    pull = next(r for r in fake.of(RequestCode.PULL_MESSAGE) if r.ext["topic"] == "T")
    assert pull.ext["queueOffset"] == "5" and pull.ext["consumerGroup"] == "G"
    flags = int(pull.ext["sysFlag"])
    assert flags & PULL_SUBSCRIPTION and flags & PULL_SUSPEND and flags & PULL_COMMIT_OFFSET
    assert pull.ext["commitOffset"] == "5" and pull.ext["subscription"] == "A || B"
    assert pull.ext["expressionType"] == "TAG" and pull.ext["subVersion"] == str(subs["T"]["subVersion"])
    assert 15_000 <= int(pull.ext["suspendTimeoutMillis"]) <= 20_000
    retry_pull = next(r for r in fake.of(RequestCode.PULL_MESSAGE) if r.ext["topic"] == "%RETRY%G")
    assert retry_pull.ext["queueOffset"] == "0"  # a retry topic starts at 0
    [bye] = fake.of(RequestCode.UNREGISTER_CLIENT)
    assert bye.ext == {"clientID": client_id, "consumerGroup": "G"}


async def test_notify_consumer_ids_changed_rebalances_at_once():
    async with FakeCluster() as fake:
        fake.topics.update({"T": 4, "%RETRY%G": 1})
        # Neither the membership poll nor the periodic rebalance can fire within this test.
        first = consumer(
            fake,
            lambda msgs: ConsumeStatus.CONSUME_SUCCESS,
            membership_poll_interval_s=300,
            rebalance_interval_s=300,
            takeover_delay_s=0,
        )
        async with first:
            assert len([mq for mq in first.owned_queues() if mq.topic == "T"]) == 4
            fake.consumers["G"].add("0.0.0.0@other")  # a second member joined (it sorts first)
            fake.notify_consumer_ids_changed("G")
            await async_wait_until(
                lambda: len([mq for mq in first.owned_queues() if mq.topic == "T"]) == 2,
                5,
                "the consumer to give up half of the queues after the notification",
            )
            assert first.notifications == 1


async def test_a_failed_message_is_sent_back_and_falls_back_to_the_retry_topic():
    async with FakeCluster() as fake:
        fake.topics.update({"T": 1, "%RETRY%G": 1})
        fake.max_offsets[("T", 0)] = 0
        fake.add_record("T", 0, 0, b"bad", TAGS="A", UNIQ_KEY="ABCDEF")
        fake.send_back_code = ResponseCode.SYSTEM_ERROR  # refused: RocketMQ's consumer then sends to %RETRY%
        attempts = []

        def listener(msgs):
            attempts.extend(m.body for m in msgs)
            return ConsumeStatus.RECONSUME_LATER

        async with consumer(fake, listener, max_reconsume_times=5):
            await async_wait_until(lambda: fake.of(RequestCode.SEND_MESSAGE_V2), 5, "the fallback send")
    [back, *_] = fake.of(RequestCode.CONSUMER_SEND_MSG_BACK)
    assert back.ext["group"] == "G" and back.ext["offset"] == "1000" and back.ext["delayLevel"] == "0"
    assert back.ext["originMsgId"] == "ABCDEF" and back.ext["originTopic"] == "T"
    assert back.ext["maxReconsumeTimes"] == "5"
    [retry, *_] = fake.of(RequestCode.SEND_MESSAGE_V2)
    assert retry.ext["b"] == "%RETRY%G" and retry.body == b"bad"
    assert (retry.ext["j"], retry.ext["l"]) == ("1", "5")
    props = string_to_properties(retry.ext["i"])
    assert props["RETRY_TOPIC"] == "T" and props["DELAY"] == "3" and props["ORIGIN_MESSAGE_ID"] == "ABCDEF"
    assert props["TAGS"] == "A"
    assert attempts[0] == b"bad"


async def test_offsets_are_committed_with_update_consumer_offset_at_stop():
    async with FakeCluster() as fake:
        fake.topics.update({"T": 1, "%RETRY%G": 1})
        fake.max_offsets[("T", 0)] = 0
        fake.add_record("T", 0, 0, b"one", TAGS="A")
        got = asyncio.Event()

        def listener(msgs):
            got.set()
            return ConsumeStatus.CONSUME_SUCCESS

        async with consumer(fake, listener):
            await asyncio.wait_for(got.wait(), 5)
            await async_wait_until(
                lambda: any(
                    r.ext["topic"] == "T" and r.ext["queueOffset"] == "1" for r in fake.of(RequestCode.PULL_MESSAGE)
                ),
                5,
                "the pull after the message",
            )
    commits = [r.ext for r in fake.of(RequestCode.UPDATE_CONSUMER_OFFSET) if r.ext["topic"] == "T"]
    assert commits[-1] == {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "1"}


async def test_consume_from_timestamp_searches_the_offset_by_time_when_nothing_is_committed():
    async with FakeCluster() as fake:
        fake.topics.update({"T": 1, "%RETRY%G": 1})
        fake.time_offsets[("T", 0)] = 7
        kw = {"consume_from_where": ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, "consume_timestamp_ms": 1_700_000_000_000}
        async with consumer(fake, lambda msgs: ConsumeStatus.CONSUME_SUCCESS, **kw):
            await async_wait_until(
                lambda: any(r.ext["topic"] == "T" for r in fake.of(RequestCode.PULL_MESSAGE)), 5, "a pull of T"
            )
    [search] = fake.of(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
    assert search.ext == {"topic": "T", "queueId": "0", "timestamp": "1700000000000"}
    assert not [r for r in fake.of(RequestCode.GET_MAX_OFFSET) if r.ext["topic"] == "T"]
    assert next(r for r in fake.of(RequestCode.PULL_MESSAGE) if r.ext["topic"] == "T").ext["queueOffset"] == "7"


async def test_a_body_a_rocketmq_client_compressed_is_inflated_before_the_listener_sees_it():
    body = b"compress me " * 1000
    async with FakeCluster() as fake:
        fake.topics.update({"T": 1, "%RETRY%G": 1})
        fake.add_record("T", 0, 0, zlib.compress(body, 5), sys_flag=0x301, TAGS="A")  # Java 4.9.4+: ZLIB type bits
        fake.add_record("T", 0, 1, zlib.compress(b"old style"), sys_flag=0x1, TAGS="A")  # before 4.9.4: type 0
        got = []

        def listener(msgs):
            got.extend(msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        async with consumer(fake, listener):
            await async_wait_until(lambda: len(got) == 2, 5, "both messages")
    assert [m.body for m in got] == [body, b"old style"]
    assert [m.sys_flag for m in got] == [0, 0]
