"""One bad message blocks nobody (issue 22 items 5 and 8), over real sockets.

Inbound: every sender (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and each of its elements, the v2
SendMessage) is refused, with its code and a remark naming the field, a system property RocketMQ or pyrmq would
parse later and could not, a header number with a sign, a sysFlag with bits the client must not set, or a body
flagged compressed that does not inflate; nothing is stored (the queue's max offset does not move).

Outbound: records stored before the checks existed (written straight into the broker's store before it starts)
that a v2 consumer cannot be given go to the group's DLQ, and the good messages around them are received.
"""

from __future__ import annotations

import asyncio
import zlib

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from broker.config import MessageStoreConfig
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft
from harness.procs import Broker
from harness.waiting import async_wait_until
from remoting.codes import RequestCode
from remoting.codes import ResponseCode as RC
from remoting.message_codec import encode_batch
from tests.integration.broker.rpc import BrokerClient, Message, group_config, message, send_ext

pytestmark = pytest.mark.integration

CLIENT_ID = [("x-mq-client-id", "pytest@poison")]
TOPIC = "PoisonIn"
SINGLE_CODES = [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2]
ALL_CODES = [*SINGLE_CODES, RequestCode.SEND_BATCH_MESSAGE]


async def max_offset(client: BrokerClient, topic: str, queue_id: int = 0) -> int:
    resp = await client.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    return int(resp.ext["offset"])


async def _send(client: BrokerClient, code: int, bad: Message, **header):
    """``bad`` alone (single sends) or after a good message (a batch): the answer, checked to have stored nothing."""
    await client.create_topic(TOPIC, queues=1)
    before = await max_offset(client, TOPIC)
    messages = [message(b"fine"), bad] if code == RequestCode.SEND_BATCH_MESSAGE else [bad]
    resp = await client.send(TOPIC, 0, messages, code=code, **header)
    assert await max_offset(client, TOPIC) == before, resp.remark
    return resp


@pytest.mark.parametrize("code", ALL_CODES)
@pytest.mark.parametrize(
    ("props", "remark_part"),
    [
        ({"TIMER_DELIVER_MS": "²"}, "TIMER_DELIVER_MS='²' is not a decimal number"),
        ({"TIMER_DELAY_SEC": "٣"}, "TIMER_DELAY_SEC"),
        ({"DELAY": ""}, "DELAY is empty"),
        ({"DELAY": "+1"}, "DELAY='+1' has a sign"),
        ({"DELAY": "-1"}, "DELAY=-1 is negative"),
        ({"REAL_QID": "x"}, "REAL_QID"),
        ({"MAX_OFFSET": "99999999999999999999"}, "MAX_OFFSET"),
        ({"RECONSUME_TIME": "1.0"}, "RECONSUME_TIME"),
        ({"__STARTDELIVERTIME": "soon"}, "__STARTDELIVERTIME"),
        ({"UNIQ_KEY": "u" * 200}, "UNIQ_KEY is 200 characters"),
        ({"TRAN_MSG": "yes"}, "send true for a half message"),
    ],
)
async def test_every_sender_refuses_a_system_property_it_cannot_parse_and_stores_nothing(
    client, code, props, remark_part
):
    resp = await _send(client, code, Message(b"bad", props))
    assert (resp.code, remark_part in resp.remark) == (RC.MESSAGE_ILLEGAL, True), resp.remark
    if code == RequestCode.SEND_BATCH_MESSAGE:
        assert resp.remark.startswith("message 1:"), resp.remark


async def test_a_batch_wide_property_is_checked_too(client):
    await client.create_topic(TOPIC, queues=1)
    before = await max_offset(client, TOPIC)
    resp = await client.send(TOPIC, 0, [message(b"a"), message(b"b")],
                             batch_properties={"WAIT": "true", "TIMER_DELIVER_MS": "²"})
    assert resp.code == RC.MESSAGE_ILLEGAL and "the batch's properties: TIMER_DELIVER_MS" in resp.remark
    assert await max_offset(client, TOPIC) == before


@pytest.mark.parametrize("code", ALL_CODES)
@pytest.mark.parametrize(
    ("sys_flag", "remark_part"),
    [
        (0x10, "BORNHOST_V6_FLAG"),
        (0x20, "STOREHOSTADDRESS_V6_FLAG"),
        (0x800, "bits RocketMQ does not define"),
        (0x80, "INNER_BATCH_FLAG"),
        (0x300, "without COMPRESSED_FLAG"),
    ],
)
async def test_a_sys_flag_with_bits_the_client_must_not_set_is_refused(client, code, sys_flag, remark_part):
    resp = await _send(client, code, message(b"bad"), sys_flag=sys_flag)
    assert (resp.code, remark_part in resp.remark) == (RC.MESSAGE_ILLEGAL, True), resp.remark


@pytest.mark.parametrize("code", ALL_CODES)
async def test_a_body_flagged_compressed_must_inflate(client, code):
    resp = await _send(client, code, message(b"plain text, not zlib"), sys_flag=0x1)
    assert resp.code == RC.MESSAGE_ILLEGAL and "does not inflate" in resp.remark, resp.remark
    good = [message(zlib.compress(b"compressed body " * 100))]
    if code == RequestCode.SEND_BATCH_MESSAGE:
        good.append(message(zlib.compress(b"another")))
    assert (await client.send(TOPIC, 0, good, code=code, sys_flag=0x1)).code == RC.SUCCESS


@pytest.mark.parametrize("code", ALL_CODES)
async def test_compressed_bodies_that_inflate_past_eight_times_max_message_size_per_request_are_refused(client, code):
    """A few KiB of zlib can inflate to gigabytes: every consumer would have to hold it. The broker inflates at most
    8 x maxMessageSize per request (32 MiB here), past the first MiB in a thread, and refuses the rest."""
    bomb = zlib.compress(b"\0" * (9 * 1024 * 1024))  # 9 KiB -> 9 MiB
    await client.create_topic(TOPIC, queues=1)
    before = await max_offset(client, TOPIC)
    bombs = [message(zlib.compress(b"\0" * (33 * 1024 * 1024)))] if code != RequestCode.SEND_BATCH_MESSAGE else [
        message(bomb) for _ in range(4)]  # each fits, together they do not
    resp = await client.send(TOPIC, 0, bombs, code=code, sys_flag=0x1)
    assert resp.code == RC.MESSAGE_ILLEGAL, resp.remark
    assert "inflates past the request's limit of 8 x maxMessageSize" in resp.remark
    assert await max_offset(client, TOPIC) == before
    assert (await client.send(TOPIC, 0, [message(bomb)], code=code, sys_flag=0x1)).code == RC.SUCCESS


@pytest.mark.parametrize("code", ALL_CODES)
async def test_a_queue_id_with_a_sign_is_refused_and_a_negative_one_lets_the_broker_pick(client, code):
    await client.create_topic(TOPIC, queues=1)
    before = await max_offset(client, TOPIC)
    ext = send_ext(TOPIC, 0, code=code, properties="WAIT\x01true")
    key = "queueId" if code == RequestCode.SEND_MESSAGE else "e"
    body = encode_batch([(0, b"x", {})]) if code == RequestCode.SEND_BATCH_MESSAGE else b"x"
    resp = await client.request(code, {**ext, key: "+1"}, body)
    assert resp.code == RC.INVALID_PARAMETER and "queueId='+1' has a sign" in (resp.remark or "")
    assert await max_offset(client, TOPIC) == before
    assert (await client.request(code, {**ext, key: "-1"}, body)).code == RC.SUCCESS


@pytest.fixture
async def v2(master):
    async with grpc.aio.insecure_channel(master.grpc_addr) as channel:
        yield sgrpc.MessagingServiceStub(channel)


def _v2_message(topic: str, body: bytes, message_id: str = "01POISONV2", **user: str) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
        message_id=message_id, message_type=pb.MessageType.NORMAL, body_encoding=pb.Encoding.IDENTITY))
    m.user_properties.update(user)
    return m


async def test_the_v2_send_refuses_system_properties_and_bad_ids_and_times_and_stores_nothing(client, v2):
    await client.create_topic(TOPIC, queues=1)
    before = await max_offset(client, TOPIC)
    late = _v2_message(TOPIC, b"x")
    late.system_properties.delivery_timestamp.seconds = -5
    cases = [
        (_v2_message(TOPIC, b"x", TIMER_DELIVER_MS="²"), pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "TIMER_DELIVER_MS"),
        (_v2_message(TOPIC, b"x", TIMER_DELAY_SEC="1"), pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "TIMER_DELAY_SEC"),
        (_v2_message(TOPIC, b"x", RECONSUME_TIME="٣"), pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "RECONSUME_TIME"),
        (_v2_message(TOPIC, b"x", message_id="M" * 200), pb.Code.ILLEGAL_MESSAGE_ID, "limit is 128"),
        (late, pb.Code.ILLEGAL_DELIVERY_TIME, "1970..9999"),
    ]
    for msg, code, part in cases:
        answer = await v2.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=CLIENT_ID, timeout=5)
        assert (answer.status.code, part in answer.status.message) == (code, True), answer.status
    assert await max_offset(client, TOPIC) == before


# -- the way out: records stored before the checks ------------------------------------------------------------------
POISON_TOPIC = "PoisonOut"
GROUP = "g-poison"
GOOD = [b"g0", b"g2", b"g4", b"g6", b"g8 " * 2000]  # g8 was stored zlib-compressed: consumers get it inflated
DEAD = [b"b1", b"b3", b"b5", b"b7 not zlib"]


async def _seed(store_dir) -> None:
    """Write the topic's queue 0 the way an old broker stored it: good messages around ones a v2 consumer cannot
    take (a TIMER_DELIVER_MS that is not a number, a bornTimestamp outside protobuf's time range, a body flagged
    compressed that is not)."""
    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=4 << 20,
                                            mapped_file_size_consume_queue=20 * 10_000))
    await store.start()
    try:
        def draft(body: bytes, born_ms: int = 1_700_000_000_000, sys_flag: int = 0, **props: str) -> MessageDraft:
            return MessageDraft(body=body, properties={"UNIQ_KEY": body[:2].hex().upper() * 8, **props},
                                born_timestamp=born_ms, born_host=("10.0.0.7", 40000), sys_flag=sys_flag)

        drafts = [draft(b"g0"), draft(b"b1", TIMER_DELIVER_MS="²"), draft(b"g2"), draft(b"b3", born_ms=10**17),
                  draft(b"g4"), draft(b"b5", TIMER_DELIVER_MS="٣"), draft(b"g6"), draft(b"b7 not zlib", sys_flag=1),
                  draft(zlib.compress(GOOD[-1]), sys_flag=1)]
        for d in drafts:
            result = await store.put_messages(POISON_TOPIC, 0, [d])
            assert result.status.stored, result
    finally:
        await store.stop()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, namesrv):
    workdir = tmp_path_factory.mktemp("broker-poison")
    broker = Broker(workdir, name="broker-poison", namesrv_addr=namesrv.addr)
    asyncio.run(_seed(broker.store_dir))
    with broker:
        yield broker


async def _receive(stub, invisible_s: int = 30) -> list:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP), message_queue=pb.MessageQueue(topic=pb.Resource(name=POISON_TOPIC)),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=32,
        invisible_duration=Duration(seconds=invisible_s), long_polling_timeout=Duration(seconds=1))
    return [r async for r in stub.ReceiveMessage(req, metadata=CLIENT_ID, timeout=10)]


async def test_records_a_v2_consumer_cannot_take_go_to_the_dlq_and_the_good_ones_around_them_are_received(seeded):
    async with BrokerClient(seeded.addr) as remoting, grpc.aio.insecure_channel(seeded.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        assert (await remoting.create_topic(POISON_TOPIC, queues=1)).code == 0
        assert (await remoting.create_group(group_config(GROUP))).code == 0
        assert await max_offset(remoting, POISON_TOPIC) == 9
        got: list[pb.Message] = []

        async def received_all() -> bool:
            answers = await _receive(stub)
            [status] = [a.status for a in answers if a.HasField("status")]
            assert status.code in (pb.Code.OK, pb.Code.MESSAGE_NOT_FOUND), status
            got.extend(a.message for a in answers if a.HasField("message"))
            return len(got) >= len(GOOD)

        await async_wait_until(received_all, 20, lambda: f"received {[m.body for m in got]}\n{seeded.log_tail()}")
        assert [m.body for m in got] == GOOD
        for m in got:  # the good ones ack as usual
            ack = await stub.AckMessage(spb.AckMessageRequest(
                group=pb.Resource(name=GROUP), topic=pb.Resource(name=POISON_TOPIC),
                entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                             receipt_handle=m.system_properties.receipt_handle)]),
                metadata=CLIENT_ID, timeout=5)
            assert ack.status.code == pb.Code.OK, ack.status

        dlq = f"%DLQ%{GROUP}"
        assert (await remoting.topic_configs())[dlq]["perm"] == 2  # write only, like RocketMQ's
        await remoting.create_topic(dlq, queues=1, perm=6)  # an operator opens it to inspect
        dead = (await remoting.pull("g-inspect", dlq, 0, 0)).messages
        assert sorted(m.body for m in dead) == DEAD
        assert {m.properties["RETRY_TOPIC"] for m in dead} == {POISON_TOPIC}
        # they were handed on, not left in flight: nothing comes back, now or once their invisible time would end
        [status] = [a.status for a in await _receive(stub) if a.HasField("status")]
        assert status.code == pb.Code.MESSAGE_NOT_FOUND
        log = seeded.output()
        assert log.count("cannot be given to v2 consumers") >= 1 and "TIMER_DELIVER_MS='²'" in log
