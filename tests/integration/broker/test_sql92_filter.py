"""SQL92 property filters against a real master and its slave (enablePropertyFilter=true): remoting pulls get
exactly the messages whose properties match, nextBeginOffset moves past the others, a bad expression is refused
at CHECK_CLIENT_CONFIG, at HEART_BEAT and at the pull with the position of the error; the v2 endpoint's
ReceiveMessage and Telemetry settings with FilterExpression{type: SQL} the same way."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from tests.brokers import master_and_slave
from tests.integration.broker.rpc import BrokerClient, group_config, message
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration

TOPIC = "SqlTopic"
GROUP = "g-sql"
N = 60
EXPRESSION = "(a BETWEEN 10 AND 14) OR (TAGS = 't0' AND a > 50) OR b = 'yes'"


def props(i: int) -> dict[str, str]:
    p = {"a": str(i), "TAGS": f"t{i % 3}"}
    if i == 33:
        p["b"] = "yes"
    return p


def expected() -> list[bytes]:
    def match(i: int) -> bool:
        p = props(i)
        return 10 <= i <= 14 or (p["TAGS"] == "t0" and i > 50) or p.get("b") == "yes"

    return [f"m-{i}".encode() for i in range(N) if match(i)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, namesrv):
    with master_and_slave(tmp_path_factory.mktemp("sql"), namesrv.addr, "broker-sql", enablePropertyFilter=True,
                          brokerSuspendMaxTimeMillis=1000) as (master, slave):
        asyncio.run(seed(master.addr, slave.addr))
        yield master, slave


async def seed(master_addr: str, slave_addr: str) -> None:
    """The topic (one queue) with N messages and the group, on the master and, synced, on the slave."""
    async with BrokerClient(master_addr) as m, BrokerClient(slave_addr) as s:
        assert (await m.create_topic(TOPIC, queues=1)).code == 0
        assert (await m.create_group(group_config(GROUP))).code == 0
        for i in range(N):
            sent = await m.send(TOPIC, 0, [message(f"m-{i}".encode(), **props(i))])
            assert sent.code == 0, sent.remark

        async def slave_ready() -> bool:
            got = await s.pull(GROUP, TOPIC, 0, N - 1, max_nums=1)
            return got.code == 0 and len(got.messages) == 1

        await async_wait_until(slave_ready, 40, "the slave to replicate the topic, its config and the group",
                               interval_s=0.5)


async def pull_sql(client: BrokerClient, expression: str, **kw):
    bodies, offset, pulls = [], 0, []
    for _ in range(N + 2):
        got = await client.pull(GROUP, TOPIC, 0, offset, max_nums=4, subscription=expression,
                                expression_type="SQL92", **kw)
        pulls.append(got)
        if got.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY):
            break
        assert got.next_begin_offset > offset, got.remark
        bodies += [m.body for m in got.messages]
        offset = got.next_begin_offset
    return bodies, offset, pulls


@pytest.mark.parametrize("node", ["master", "slave"])
async def test_a_sql92_pull_gets_exactly_the_matching_messages_and_moves_past_the_rest(pair, node):
    broker = pair[0] if node == "master" else pair[1]
    async with BrokerClient(broker.addr) as client:
        bodies, offset, pulls = await pull_sql(client, EXPRESSION)
        assert bodies == expected()
        assert offset == N and pulls[-1].code == ResponseCode.PULL_NOT_FOUND
        # max_nums 4 but 5 matches in a row after 10 misses: the first pull skipped the misses in the same read
        assert pulls[0].messages and pulls[0].messages[0].body == b"m-10"
        nothing = await client.pull(GROUP, TOPIC, 0, 0, subscription="a > 1000", expression_type="SQL92")
        assert nothing.code == ResponseCode.PULL_RETRY_IMMEDIATELY and not nothing.messages
        assert nothing.next_begin_offset == N  # every non-matching record skipped, the consumer is not stuck


async def test_the_heartbeats_sql92_subscription_filters_pulls_that_do_not_carry_one(pair):
    async with BrokerClient(pair[0].addr) as client:
        ok = await client.heartbeat("c-hb", {GROUP: {TOPIC: "a IN ('5') OR b IS NOT NULL"}}, expression_type="SQL92")
        assert ok.code == 0, ok.remark
        got = await client.pull(GROUP, TOPIC, 0, 0, sys_flag=0, subscription=None, expression_type="SQL92")
        assert got.code == 0, got.remark
        assert [m.body for m in got.messages] == [b"m-5", b"m-33"]


async def test_a_bad_expression_is_refused_with_its_position_at_check_heartbeat_and_pull(pair):
    bad = "a > 5 AND (b = 'x'"
    async with BrokerClient(pair[0].addr) as client:
        body = {"clientId": "c-bad", "group": GROUP,
                "subscriptionData": {"topic": TOPIC, "subString": bad, "expressionType": "SQL92"}}
        checked = await client.request(RequestCode.CHECK_CLIENT_CONFIG, body=fastjson.dumps(body))
        assert checked.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "position 19" in checked.remark and "closing )" in checked.remark
        good = dict(body, subscriptionData=dict(body["subscriptionData"], subString="a > 5 AND b = 'x'"))
        assert (await client.request(RequestCode.CHECK_CLIENT_CONFIG, body=fastjson.dumps(good))).code == 0

        hb = await client.heartbeat("c-bad", {"g-bad": {TOPIC: "a > 'x'"}}, expression_type="SQL92")
        assert hb.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "g-bad" in hb.remark and TOPIC in hb.remark and "position 5" in hb.remark
        # refused as a whole: nothing of that heartbeat was registered
        assert (await client.consumer_ids("g-bad")).code == ResponseCode.SYSTEM_ERROR

        pulled = await client.pull(GROUP, TOPIC, 0, 0, subscription="a >", expression_type="SQL92")
        assert pulled.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "position 4" in pulled.remark
        odd = await client.pull(GROUP, TOPIC, 0, 0, subscription="x", expression_type="GROOVY")
        assert odd.code == ResponseCode.SYSTEM_ERROR and "GROOVY" in odd.remark


# the v2 endpoint (RocketMQ 5 clients): FilterExpression{type: SQL} on ReceiveMessage and in Telemetry settings ---
V2_CLIENT = [("x-mq-client-id", "pytest@sql")]


def _receive_request(group: str, expression: str) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        filter_expression=pb.FilterExpression(type=pb.FilterType.SQL, expression=expression), batch_size=4,
        invisible_duration=Duration(seconds=60), long_polling_timeout=Duration(seconds=0))


async def _receive(stub, group: str, expression: str) -> tuple[pb.Status, list[pb.Message]]:
    answers = [r async for r in stub.ReceiveMessage(_receive_request(group, expression), metadata=V2_CLIENT,
                                                    timeout=10)]
    [status] = [r.status for r in answers if r.HasField("status")]
    return status, [r.message for r in answers if r.HasField("message")]


async def test_a_v2_receive_with_a_sql_filter_gets_exactly_the_matching_messages(pair):
    async with grpc.aio.insecure_channel(pair[0].grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        got: list[bytes] = []
        for _ in range(N):
            status, messages = await _receive(stub, "g-v2-sql", EXPRESSION)
            if status.code == pb.Code.MESSAGE_NOT_FOUND:
                break
            assert status.code == pb.Code.OK, status.message
            got += [m.body for m in messages]
        assert got == expected()
        assert all(m.system_properties.tag for m in messages)

        status, _ = await _receive(stub, "g-v2-sql", "a BETWEEN 1 AND")
        assert status.code == pb.Code.ILLEGAL_FILTER_EXPRESSION and "position 16" in status.message


async def test_v2_telemetry_settings_with_a_bad_sql_subscription_are_refused_with_the_position(pair):
    def settings(expression: str) -> spb.TelemetryCommand:
        sub = pb.SubscriptionEntry(topic=pb.Resource(name=TOPIC),
                                   expression=pb.FilterExpression(type=pb.FilterType.SQL, expression=expression))
        return spb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.ClientType.SIMPLE_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name="g-v2-tele"), subscriptions=[sub])))

    async with grpc.aio.insecure_channel(pair[0].grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        sent: asyncio.Queue = asyncio.Queue()

        async def commands():
            while True:
                yield await sent.get()

        call = stub.Telemetry(commands(), metadata=V2_CLIENT)
        await sent.put(settings("a IN (1)"))
        refused = await asyncio.wait_for(call.read(), 10)
        assert refused.status.code == pb.Code.ILLEGAL_FILTER_EXPRESSION
        assert "position 7" in refused.status.message and "IN's list" in refused.status.message
        await sent.put(settings("a IN ('1')"))
        accepted = await asyncio.wait_for(call.read(), 10)
        assert accepted.status.code == pb.Code.OK, accepted.status.message
        call.cancel()
