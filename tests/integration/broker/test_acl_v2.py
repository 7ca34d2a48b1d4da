"""ACL 2.0 on the gRPC v2 endpoint of a real broker process (authentication and authorization on), raw v2 calls with
the headers a RocketMQ 5 client sends: a signed user sends and receives where its policy lets it and gets FORBIDDEN
naming the grant elsewhere; a missing, malformed or forged header, an unknown user, a signature over another
date-time and a date-time replayed from 10 minutes ago get UNAUTHORIZED naming the failed check, never a secret, and
store nothing; the same user works on remoting and v2 alike."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from client import AdminClient, acl_admin
from remoting.acl_signature import v2_metadata, v2_signature
from remoting.codes import ResponseCode
from tests.brokers import acl_conf, broker_fixture
from tests.integration.broker.rpc import BrokerClient, group_config, message

pytestmark = pytest.mark.integration

ROOT, ROOT_PW = "root", "root-secret-v2"
BOB, BOB_PW = "bob", "bob-secret-v2"
TOPIC, SECRET_TOPIC, GROUP = "V2AclOrders", "V2AclSecret", "v2-acl-bob"
CLIENT_ID = ("x-mq-client-id", "pytest@acl-v2")


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-acl-v2", **acl_conf(ROOT, ROOT_PW))


@pytest.fixture(scope="module")
def prepared(master, namesrv):
    """Topics, bob's group, bob (Normal) with Pub and Sub on V2AclOrders and his group only."""
    async def prepare() -> None:
        async with BrokerClient(master.addr, credentials=(ROOT, ROOT_PW)) as root:
            for topic in (TOPIC, SECRET_TOPIC):
                assert (await root.create_topic(topic, queues=1)).code == ResponseCode.SUCCESS
            assert (await root.create_group(group_config(GROUP))).code == ResponseCode.SUCCESS
        async with AdminClient(namesrv.addr, credentials=(ROOT, ROOT_PW)) as admin:
            await acl_admin.create_user(admin, master.addr, acl_admin.user_info(BOB, BOB_PW, "Normal"))
            await acl_admin.create_acl(admin, master.addr, acl_admin.acl_info(
                f"User:{BOB}", [f"Topic:{TOPIC}", f"Group:{GROUP}"], ["Pub", "Sub"]))
    asyncio.run(prepare())
    return master


def md(access_key: str, secret_key: str, **kw) -> list[tuple[str, str]]:
    return [CLIENT_ID, *v2_metadata(access_key, secret_key, **kw)]


def send_request(topic: str, body: bytes) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
            message_id="01ACLV2" + body.hex()[:20].upper(), message_type=pb.MessageType.NORMAL,
            body_encoding=pb.Encoding.IDENTITY))])


def receive_request(group: str, topic: str) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=32,
        invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=0))


async def stub_of(master):
    channel = grpc.aio.insecure_channel(master.grpc_addr)
    return channel, sgrpc.MessagingServiceStub(channel)


async def max_offset(master, topic: str) -> int:
    async with BrokerClient(master.addr, credentials=(ROOT, ROOT_PW)) as root:
        return len(await root.pull_all("v2-acl-counter", topic, 0))


async def test_a_signed_user_sends_and_receives_where_granted_and_is_forbidden_elsewhere(prepared):
    master = prepared
    channel, stub = await stub_of(master)
    async with channel:
        sent = await stub.SendMessage(send_request(TOPIC, b"from bob over v2"), metadata=md(BOB, BOB_PW))
        assert sent.status.code == pb.Code.OK, sent.status.message
        denied = await stub.SendMessage(send_request(SECRET_TOPIC, b"not his"), metadata=md(BOB, BOB_PW))
        assert denied.status.code == pb.Code.FORBIDDEN
        assert f"Pub on Topic:{SECRET_TOPIC} is not granted" in denied.status.message

        route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=md(BOB, BOB_PW))
        assert route.status.code == pb.Code.OK, route.status.message
        got = [r async for r in stub.ReceiveMessage(receive_request(GROUP, TOPIC), metadata=md(BOB, BOB_PW))]
        bodies = [r.message.body for r in got if r.HasField("message")]
        assert bodies == [b"from bob over v2"], got
        handle = next(r.message.system_properties.receipt_handle for r in got if r.HasField("message"))
        ack = await stub.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
            entries=[spb.AckMessageEntry(message_id="x", receipt_handle=handle)]), metadata=md(BOB, BOB_PW))
        assert ack.status.code == pb.Code.OK, ack.status.message

        other = [r async for r in stub.ReceiveMessage(receive_request("v2-acl-other", TOPIC), metadata=md(BOB, BOB_PW))]
        [status] = [r.status for r in other if r.HasField("status")]
        assert status.code == pb.Code.FORBIDDEN and "Sub on Group:v2-acl-other" in status.message
        change = await stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="v2-acl-other"), topic=pb.Resource(name=TOPIC), receipt_handle=handle,
            invisible_duration=Duration(seconds=1)), metadata=md(BOB, BOB_PW))
        assert change.status.code == pb.Code.FORBIDDEN and "Group:v2-acl-other" in change.status.message

        root_sent = await stub.SendMessage(send_request(SECRET_TOPIC, b"root may"), metadata=md(ROOT, ROOT_PW))
        assert root_sent.status.code == pb.Code.OK, root_sent.status.message  # a Super user: anything

    async with BrokerClient(master.addr, credentials=(BOB, BOB_PW)) as bob:  # the same user and policy on remoting
        assert (await bob.send(TOPIC, 0, [message(b"remoting")])).code == ResponseCode.SUCCESS
        assert (await bob.send(SECRET_TOPIC, 0, [message(b"no")])).code == ResponseCode.NO_PERMISSION


async def test_bad_v2_credentials_are_unauthorized_by_name_of_the_check_and_store_nothing(prepared):
    master = prepared
    before = await max_offset(master, TOPIC)
    good = dict(v2_metadata(BOB, BOB_PW))
    ten_minutes_ago = md(BOB, BOB_PW, epoch_s=time.time() - 600)  # a captured header, correctly signed
    other_date = [CLIENT_ID, ("authorization", good["authorization"]),  # signed over another date-time
                  ("x-mq-date-time", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 60)))]
    cases = [
        ([CLIENT_ID], "the authorization header is missing"),
        ([CLIENT_ID, ("authorization", good["authorization"])], "x-mq-date-time header is missing"),
        ([CLIENT_ID, ("authorization", "Bearer t0ken"), ("x-mq-date-time", good["x-mq-date-time"])],
         "does not start with MQv2-HMAC-SHA1"),
        ([CLIENT_ID, ("authorization", f"MQv2-HMAC-SHA1 Credential={BOB}, SignedHeaders=x-mq-date-time"),
          ("x-mq-date-time", good["x-mq-date-time"])], "has no Signature"),
        ([CLIENT_ID, ("authorization", "MQv2-HMAC-SHA1 Credential=, Signature=" + "0" * 40),
          ("x-mq-date-time", good["x-mq-date-time"])], "no Credential"),
        (md(BOB, "not-his-secret"), "signature does not match"),
        (md("mallory", "x"), "no user 'mallory'"),
        (md("k" * 300, "x"), "AccessKey is not a user name"),
        ([CLIENT_ID, ("authorization", "MQv2-HMAC-SHA1 Credential=" + "k" * 1100 + ", Signature=" + "0" * 40),
          ("x-mq-date-time", good["x-mq-date-time"])], "longer than 1024"),
        ([CLIENT_ID, ("authorization", good["authorization"]), ("x-mq-date-time", "yesterday")],
         "not yyyyMMddTHHmmssZ"),
        (other_date, "signature does not match"),
        (ten_minutes_ago, "away from the broker's clock"),
    ]
    channel, stub = await stub_of(master)
    async with channel:
        for metadata, says in cases:
            answer = await stub.SendMessage(send_request(TOPIC, b"must not be stored"), metadata=metadata)
            assert answer.status.code == pb.Code.UNAUTHORIZED, (says, answer.status)
            assert says in answer.status.message, (says, answer.status.message)
            assert BOB_PW not in answer.status.message and "authentication failed" in answer.status.message

        async def commands():
            yield spb.TelemetryCommand(settings=pb.Settings(
                client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=TOPIC)])))
            await asyncio.Event().wait()
        call = stub.Telemetry(commands(), metadata=md(BOB, "wrong"))
        first = await call.read()
        assert first.status.code == pb.Code.UNAUTHORIZED and "signature does not match" in first.status.message
        assert await call.read() == grpc.aio.EOF, "the stream ends after its refusal"
        call = stub.Telemetry(commands(), metadata=md(BOB, BOB_PW))
        assert (await call.read()).status.code == pb.Code.OK
        call.cancel()
        # a correct signature over the header's own date-time is still accepted
        date_time = good["x-mq-date-time"]
        fine = [CLIENT_ID, ("authorization", f"MQv2-HMAC-SHA1 Credential={BOB}, SignedHeaders=x-mq-date-time, "
                                             f"Signature={v2_signature(BOB_PW, date_time)}"),
                ("x-mq-date-time", date_time)]
        assert (await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)),
                                      metadata=fine)).status.code == pb.Code.OK
    assert await max_offset(master, TOPIC) == before, "no refused message was stored"
    log = master.log_path.read_text(errors="replace")
    assert "refused SendMessage from 127.0.0.1" in log and BOB_PW not in log
