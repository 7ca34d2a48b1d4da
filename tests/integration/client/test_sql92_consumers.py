"""The SDK's consumers with SQL92 selectors (RocketMQ's MessageSelector.bySql) against a real broker with
enablePropertyFilter=true: push and pull consumers get exactly the messages whose properties match; a bad
expression, or a broker with the switch off, fails at CHECK_CLIENT_CONFIG with the broker's reason."""

from __future__ import annotations

import pytest

from client import BrokerError, Message, MessageQueue, MessageSelector, Producer, PullConsumer, PullStatus
from remoting.codes import ResponseCode
from tests.brokers import broker_fixture
from tests.integration.client.conftest import Recorder, create_topic, push_consumer, unique, wait_for

pytestmark = pytest.mark.integration

N = 40
SQL = "TAGS IN ('odd') AND n >= 20"


@pytest.fixture(scope="module")
def broker(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-sql", enablePropertyFilter=True)


@pytest.fixture(scope="module")
def plain_broker(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-nosql", brokerClusterName="NoSqlCluster")


def matching() -> list[bytes]:
    return [f"n-{i}".encode() for i in range(N) if i % 2 and i >= 20]


async def sent_topic(namesrv, admin, broker) -> str:
    topic = unique("T_sql")
    await create_topic(admin, broker, topic, queues=1)
    async with Producer(unique("P"), namesrv.addr) as producer:
        for i in range(N):
            await producer.send(Message(topic, f"n-{i}".encode(), tags="odd" if i % 2 else "even",
                                        properties={"n": str(i)}))
    return topic


async def test_a_push_consumer_subscribed_by_sql92_gets_exactly_the_matching_messages(namesrv, admin, broker):
    topic = await sent_topic(namesrv, admin, broker)
    recorder = Recorder()
    consumer = push_consumer(namesrv, unique("G_sql_push"), topic, recorder, MessageSelector.by_sql(SQL))
    async with consumer:
        await wait_for(lambda: recorder.unique_count() >= len(matching()), 30, "the matching messages")
    assert sorted(recorder.bodies, key=lambda b: int(b[2:])) == matching()
    assert all(m.tags == "odd" and int(m.properties["n"]) >= 20 for m in recorder.messages)


async def test_a_pull_consumer_pulls_by_sql92_and_moves_past_what_does_not_match(namesrv, admin, broker):
    topic = await sent_topic(namesrv, admin, broker)
    mq = MessageQueue(topic, "broker-sql", 0)
    async with PullConsumer(unique("G_sql_pull"), namesrv.addr) as puller:
        got, offset = [], 0
        for _ in range(N):
            result = await puller.pull(mq, offset, max_nums=4, sql92=SQL)
            if result.status is PullStatus.NO_NEW_MSG:
                break
            got += [m.body for m in result.messages]
            assert result.next_begin_offset > offset
            offset = result.next_begin_offset
        assert got == matching() and offset == N
        with pytest.raises(BrokerError) as refused:
            await puller.pull(mq, 0, sql92="n > 'x'")
    assert refused.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "position 5" in refused.value.remark


async def test_sql92_consumers_fail_at_start_on_a_broker_without_enable_property_filter(namesrv, admin, plain_broker):
    topic = unique("T_nosql")
    await create_topic(admin, plain_broker, topic, queues=1)
    consumer = push_consumer(namesrv, unique("G_nosql"), topic, Recorder(), MessageSelector.by_sql("n > 1"))
    with pytest.raises(BrokerError) as refused:
        await consumer.start()
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert "enablePropertyFilter=true" in str(refused.value)
    await consumer.stop()  # a stop after a failed start has nothing to undo
