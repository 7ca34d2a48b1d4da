"""Failures the SDK must report clearly: no route, no nameserver, a broker's refusal with code and remark."""

from __future__ import annotations

import pytest

from client import (
    BrokerError,
    BrokerUnreachableError,
    Message,
    MessageQueue,
    NoNameserverError,
    NoRouteError,
    Producer,
    PullConsumer,
    SendStatus,
)
from remoting.codes import RequestCode, ResponseCode
from tests.brokers import broker_fixture
from tests.integration.client.conftest import create_topic, unique
from harness.procs import Broker, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-strict", autoCreateTopicEnable=False,
                              maxMessageSize=1024)


async def test_sending_to_an_unknown_topic_without_auto_create_says_how_to_create_it(namesrv, strict_broker):
    topic = unique("T_missing")
    async with Producer(unique("P"), namesrv.addr, send_timeout_s=2.0) as producer:
        with pytest.raises(BrokerError) as info:
            await producer.send(Message(topic, b"x"))
    # The nameserver has no route, so the producer tried the cluster's masters (RocketMQ's TBW102 path);
    # the broker refused because autoCreateTopicEnable=false and said so.
    text = str(info.value)
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    assert topic in text and info.value.broker_addr == strict_broker.addr
    assert "updateTopic" in text and "autoCreateTopicEnable" in text
    # what failed is in fields, not only in the text (issue 22 item 13)
    assert info.value.request_code == RequestCode.SEND_MESSAGE_V2 and info.value.request_name == "SEND_MESSAGE_V2"
    assert info.value.response_code == ResponseCode.TOPIC_NOT_EXIST and "autoCreateTopicEnable" in info.value.remark


async def test_pulling_a_topic_without_route_raises_no_route_error(namesrv, strict_broker):
    topic = unique("T_noroute")
    async with PullConsumer(unique("G"), namesrv.addr) as puller:
        with pytest.raises(NoRouteError) as info:
            await puller.fetch_subscribe_queues(topic)
    assert f"no route for topic {topic}" in str(info.value)
    assert "mqctl updateTopic" in str(info.value)
    assert not info.value.retriable


async def test_an_unreachable_nameserver_is_named_with_a_hint():
    closed = f"127.0.0.1:{free_port()}"
    async with Producer(unique("P"), closed, send_timeout_s=1.0) as producer:
        with pytest.raises(NoNameserverError) as info:
            await producer.send(Message("AnyTopic", b"x"))
    assert closed in str(info.value)
    assert "NAMESRV_ADDR" in str(info.value)
    last = info.value.last  # the last nameserver's own error, with its fields
    assert isinstance(last, BrokerUnreachableError) and last.addr == closed and last.status == "CONNECT_FAILED"
    assert last.request_name == "GET_ROUTEINFO_BY_TOPIC" and last.details
    assert info.value.retriable


async def test_a_broker_refusal_carries_its_code_and_remark(namesrv, strict_broker, admin):
    topic = unique("T_big")
    await create_topic(admin, strict_broker, topic, queues=1)
    async with Producer(unique("P"), namesrv.addr) as producer:
        ok = await producer.send(Message(topic, b"small"))
        with pytest.raises(BrokerError) as info:
            await producer.send(Message(topic, b"x" * 4096))
    assert ok.message_queue == MessageQueue(topic, "broker-strict", 0)
    err = info.value
    assert err.code == ResponseCode.MESSAGE_ILLEGAL
    assert err.remark and err.broker_addr == strict_broker.addr
    assert not err.retriable
    assert producer.stats.retries == 0  # an illegal message is not retried


async def test_a_sync_master_without_slave_answers_slave_not_available_as_a_status(tmp_path, namesrv, admin):
    b = Broker(tmp_path / "sync", name="broker-sync", namesrv_addr=namesrv.addr, role="SYNC_MASTER").start()
    try:
        topic = unique("T_sync")
        await create_topic(admin, b, topic, queues=1)
        async with Producer(unique("P"), namesrv.addr) as producer:
            results = [await producer.send(Message(topic, f"w-{i}".encode())) for i in range(3)]
            stats = producer.stats
    finally:
        b.stop()
    # Stored on the master but not replicated: the caller sees it, and the producer does not resend it.
    assert [r.status for r in results] == [SendStatus.SLAVE_NOT_AVAILABLE] * 3
    assert [r.queue_offset for r in results] == [0, 1, 2]
    assert stats.retries == 0 and stats.rpcs == 3


async def test_a_dead_nameserver_in_the_list_is_skipped_for_a_live_one(namesrv, strict_broker, admin):
    topic = unique("T_ns_rotate")
    await create_topic(admin, strict_broker, topic, queues=1)
    addrs = f"127.0.0.1:{free_port()};{namesrv.addr}"
    async with Producer(unique("P"), addrs) as producer:
        result = await producer.send(Message(topic, b"via the second nameserver"))
    assert result.status is SendStatus.SEND_OK
