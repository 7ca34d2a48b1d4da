"""Client management over remoting against a real broker: HEART_BEAT registers a connection's groups and
subscriptions, NOTIFY_CONSUMER_IDS_CHANGED reaches the other consumers of a group when one joins or leaves,
GET_CONSUMER_LIST_BY_GROUP, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG and the orderly consumers' queue locks."""

from __future__ import annotations

import asyncio

import pytest

from remoting import fastjson
from remoting.codes import CURRENT_VERSION, RequestCode, ResponseCode
from tests.integration.broker.rpc import BrokerClient, message
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration


class Consumer:
    """A raw client that records the NOTIFY_CONSUMER_IDS_CHANGED requests the broker sends it."""

    def __init__(self, addr: str, client_id: str) -> None:
        self.client = BrokerClient(addr)
        self.client_id = client_id
        self.notified: list[str] = []
        self.client.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_notify)

    def _on_notify(self, conn, request):
        assert request.is_oneway
        self.notified.append(request.ext["consumerGroup"])

    async def join(self, group: str, topic: str, expr: str = "*"):
        return await self.client.heartbeat(self.client_id, {group: {topic: expr}})


async def consumer_ids(client: BrokerClient, group: str) -> list[str]:
    resp = await client.consumer_ids(group)
    return fastjson.loads(resp.body)["consumerIdList"] if resp.code == 0 else []


async def test_a_heartbeat_registers_the_consumer_answers_with_the_broker_version_and_creates_the_retry_topic(master):
    c = Consumer(master.addr, "10.0.0.1@hb")
    try:
        resp = await c.join("g-hb", "HbTopic")
        assert (resp.code, resp.version) == (ResponseCode.SUCCESS, CURRENT_VERSION)
        assert await consumer_ids(c.client, "g-hb") == ["10.0.0.1@hb"]
        assert "%RETRY%g-hb" in await c.client.topic_configs()
    finally:
        await c.client.close()


async def test_a_second_consumer_joining_or_leaving_is_announced_to_the_first(master):
    first, second = Consumer(master.addr, "10.0.0.1@one"), Consumer(master.addr, "10.0.0.2@two")
    try:
        await first.join("g-notify", "NotifyTopic")
        # like RocketMQ, every connection of the group hears of a change, the new one included
        await async_wait_until(lambda: first.notified == ["g-notify"], 5, "the first consumer was not told it joined")
        await second.join("g-notify", "NotifyTopic")
        await async_wait_until(lambda: len(first.notified) == 2, 5, "the first consumer was not told of the second")
        assert await consumer_ids(first.client, "g-notify") == ["10.0.0.1@one", "10.0.0.2@two"]
        await second.join("g-notify", "NotifyTopic")  # a repeated heartbeat changes nothing
        await second.client.close()  # its connection closes: it leaves the group (RocketMQ's channel close)
        await async_wait_until(lambda: len(first.notified) == 3, 5, "the first consumer was not told of the leave")
        assert first.notified == ["g-notify"] * 3
        assert await consumer_ids(first.client, "g-notify") == ["10.0.0.1@one"]
    finally:
        await first.client.close()
        await second.client.close()


async def test_unregister_client_removes_the_consumer_and_an_empty_group_is_an_error_with_rocketmqs_remark(master):
    c = Consumer(master.addr, "10.0.0.3@bye")
    try:
        await c.join("g-bye", "ByeTopic")
        resp = await c.client.request(
            RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.3@bye", "consumerGroup": "g-bye"}
        )
        assert resp.code == ResponseCode.SUCCESS
        gone = await c.client.consumer_ids("g-bye")
        assert (gone.code, gone.remark) == (ResponseCode.SYSTEM_ERROR, "no consumer for this group, g-bye")
    finally:
        await c.client.close()


async def test_a_producer_heartbeat_registers_the_connection_with_its_language_and_version(master):
    c = BrokerClient(master.addr)
    try:
        assert (await c.heartbeat("10.0.0.4@prod", producers=["pg-hb"])).code == 0
        resp = await c.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg-hb"})
        [connection] = fastjson.loads(resp.body)["connectionSet"]
        assert connection["clientId"] == "10.0.0.4@prod"
        assert (connection["language"], connection["version"]) == ("PYTHON", CURRENT_VERSION)
    finally:
        await c.close()


async def test_check_client_config_accepts_tags_and_refuses_sql92_while_enable_property_filter_is_off(client):
    ok = {"clientId": "c", "group": "g", "subscriptionData": {"topic": "T", "subString": "a || b",
                                                                 "expressionType": "TAG"}}
    assert (await client.request(RequestCode.CHECK_CLIENT_CONFIG, body=fastjson.dumps(ok))).code == 0
    sql = {"clientId": "c", "group": "g", "subscriptionData": {"topic": "T", "subString": "a > 1",
                                                                  "expressionType": "SQL92"}}
    refused = await client.request(RequestCode.CHECK_CLIENT_CONFIG, body=fastjson.dumps(sql))
    assert refused.code == ResponseCode.SYSTEM_ERROR  # RocketMQ's code; its clients fail the start on it
    assert "filter message by SQL92" in refused.remark and "enablePropertyFilter=true" in refused.remark


def lock_body(client_id: str, queues: list[int], group: str = "g-lock") -> bytes:
    mqs = [{"brokerName": "broker-a", "queueId": q, "topic": "LockTopic"} for q in queues]
    return fastjson.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": mqs})


async def test_queue_locks_have_one_holder_until_it_unlocks(client):
    async def lock(client_id: str, queues: list[int]) -> list[int]:
        resp = await client.request(RequestCode.LOCK_BATCH_MQ, body=lock_body(client_id, queues))
        assert resp.code == 0, resp.remark
        return sorted(mq["queueId"] for mq in fastjson.loads(resp.body)["lockOKMQSet"])

    assert await lock("c1", [0, 1]) == [0, 1]
    assert await lock("c2", [0, 1, 2]) == [2]
    assert await lock("c1", [0]) == [0]  # renewal
    await client.oneway(RequestCode.UNLOCK_BATCH_MQ, body=lock_body("c1", [0, 1]))

    async def taken_over():
        return await lock("c2", [0, 1]) == [0, 1]

    await async_wait_until(taken_over, 5, "the unlocked queues were not free for another client")
    bad = await client.request(RequestCode.LOCK_BATCH_MQ, body=b'{"consumerGroup":"g"}')
    assert bad.code == ResponseCode.INVALID_PARAMETER and "clientId" in bad.remark


async def test_consumers_of_many_groups_on_many_connections_are_all_listed(master):
    consumers = [Consumer(master.addr, f"10.0.1.{i}@many") for i in range(8)]
    try:
        await asyncio.gather(*(c.join("g-many", "ManyTopic") for c in consumers))
        assert await consumer_ids(consumers[0].client, "g-many") == sorted(c.client_id for c in consumers)
    finally:
        for c in consumers:
            await c.client.close()


async def test_the_cpp_clients_heartbeat_with_enum_numbers_and_string_versions_registers_its_subscriptions(client):
    """The shape PyPI rocketmq 0.4.4 (rocketmq-client-cpp 1.0.1) sends (tests/compat/CLIENT_NOTES.md)."""
    body = (
        b'{"clientID":"4242-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
        b'"groupName":"g-cpp","messageModel":1,"subscriptionDataSet":[{"subString":"*","subVersion":"1795563103827",'
        b'"topic":"%RETRY%g-cpp"},{"codeSet":[0,0],"subString":"TagA || TagC","subVersion":"1795563103827",'
        b'"tagsSet":["TagA","TagC"],"topic":"CppTopic"}]}]}\n'
    )
    assert (await client.request(RequestCode.HEART_BEAT, body=body)).code == 0
    resp = await client.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g-cpp"})
    info = fastjson.loads(resp.body)
    assert (info["consumeType"], info["messageModel"], info["consumeFromWhere"]) == (
        "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET"
    )
    assert info["subscriptionTable"]["CppTopic"]["subVersion"] == 1795563103827
    await client.send("CppTopic", 0, [message(b"a", TAGS="TagA"), message(b"b", TAGS="TagB")])
    got = await client.pull("g-cpp", "CppTopic", 0, 0, sys_flag=0, subscription=None, sub_version=1795563103827)
    assert [m.tags for m in got.messages] == ["TagA"]
