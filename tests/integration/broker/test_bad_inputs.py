"""Every bad input gets its own code and a remark saying what to fix (reliability.md §7 B-MSG / B-CONS / B-ADMIN,
issue 16 "Bad input"), a frame that does not decode closes only its own connection, nothing is stored, and the
broker keeps serving afterwards."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest

from remoting.codes import RequestCode
from remoting.codes import ResponseCode as RC
from remoting.frame_codec import FrameDecoder, RemotingCommand, decode
from remoting.message_codec import encode_batch
from tests.integration.broker.rpc import message, send_ext
from harness.procs import free_port

pytestmark = pytest.mark.integration

MAX_BODY = 4 * 1024 * 1024


async def raw_exchange(addr: str, data: bytes, timeout_s: float = 5) -> RemotingCommand | None:
    """Write raw bytes on a fresh connection: the first response, or None when the broker closed it."""
    host, port = addr.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        decoder = FrameDecoder()
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return None
                frames = decoder.feed(chunk)
                if frames:
                    return decode(frames[0])
    finally:
        writer.close()


def json_frame(header: dict, body: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


async def max_offset(client, topic: str, queue_id: int = 0) -> int:
    resp = await client.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    return int(resp.ext["offset"])


@pytest.mark.parametrize(
    ("topic", "queue_id", "messages", "code", "remark_part"),
    [
        ("BadT", 0, [message(b"")], RC.MESSAGE_ILLEGAL, "empty body"),
        ("BadT", 0, [message(b"x" * (MAX_BODY + 1))], RC.MESSAGE_ILLEGAL, "maxMessageSize"),
        ("BadT", 0, [message(b"x", big="v" * 40_000)], RC.MESSAGE_ILLEGAL, "32767"),
        ("BadT", 0, [message(b"x", DELAY="soon")], RC.MESSAGE_ILLEGAL, "delay level"),
        ("BadT", 0, [message(b"x", DELAY="1.5")], RC.MESSAGE_ILLEGAL, "delay level"),
        ("BadT", 0, [message(b"x", DELAY="٣")], RC.MESSAGE_ILLEGAL, "delay level"),
        ("BadT", 0, [message(b"x", DELAY="²")], RC.MESSAGE_ILLEGAL, "delay level"),
        ("BadT", 0, [message(b"x", DELAY=" 2")], RC.MESSAGE_ILLEGAL, "delay level"),
        ("BadT", 0, [message(b"a"), message(b"")], RC.MESSAGE_ILLEGAL, "empty body"),
        ("BadT", 0, [message(b"a"), message(b"x" * (MAX_BODY + 1))], RC.MESSAGE_ILLEGAL, "maxMessageSize"),
        ("T" * 128, 0, [message(b"x")], RC.MESSAGE_ILLEGAL, "limit is 127"),
        ("../../../fuzz2019", 0, [message(b"x")], RC.MESSAGE_ILLEGAL, "letters, digits"),
        ("has space", 0, [message(b"x")], RC.MESSAGE_ILLEGAL, "letters, digits"),
        ("SCHEDULE_TOPIC_XXXX", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("RMQ_SYS_TRANS_HALF_TOPIC", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("rmq_sys_anything", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("TBW102", 0, [message(b"x")], RC.NO_PERMISSION, "forbidden"),
        ("%DLQ%g", 0, [message(b"x")], RC.NO_PERMISSION, "ConsumerSendMsgBack"),
        ("%RETRY%g", 0, [message(b"x"), message(b"y")], RC.MESSAGE_ILLEGAL, "retry group"),
        ("BadT", 4, [message(b"x")], RC.INVALID_PARAMETER, "0..3"),
        ("BadT", 2**31 - 1, [message(b"x")], RC.INVALID_PARAMETER, "out of range"),
        ("BadT", 0, [message(b"x", TRAN_MSG="true"), message(b"y")], RC.MESSAGE_ILLEGAL, "transaction messages"),
    ],
)
async def test_a_bad_send_is_refused_with_its_code_and_a_hint_and_nothing_is_stored(
    client, topic, queue_id, messages, code, remark_part
):
    await client.create_topic("BadT", queues=4)
    resp = await client.send(topic, queue_id, messages)
    assert (resp.code, remark_part in resp.remark) == (code, True), resp.remark
    assert await max_offset(client, "BadT") == 0


async def test_a_property_value_holding_a_separator_is_refused(client):
    ext = send_ext("BadT", 0, properties="k\x01v\x01w")
    resp = await client.request(RequestCode.SEND_MESSAGE_V2, ext, b"x")
    assert resp.code == RC.MESSAGE_ILLEGAL and "separators" in resp.remark


@pytest.mark.parametrize(
    ("body", "remark_part"),
    [
        (b"", "empty"),
        (encode_batch([(0, b"abc", {})])[:-1], "left"),  # torn
        (b"\x00" * 30, "TOTALSIZE"),
        (struct.pack(">iiiii", 22 + 3, 7, 0, 0, 3) + b"abc\x00\x00", "MAGICCODE"),
    ],
)
async def test_a_batch_body_that_does_not_decode_is_refused_with_where_it_broke(client, body, remark_part):
    ext = send_ext("BadT", 0, code=RequestCode.SEND_BATCH_MESSAGE, properties="WAIT\x01true")
    resp = await client.request(RequestCode.SEND_BATCH_MESSAGE, ext, body)
    assert resp.code == RC.MESSAGE_ILLEGAL and remark_part in resp.remark, resp.remark
    assert set(resp.ext) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}


async def test_a_body_of_exactly_max_message_size_is_accepted(client):
    resp = await client.send("BigBodyTopic", 0, [message(b"x" * MAX_BODY)])
    assert resp.code == RC.SUCCESS, resp.remark


async def test_an_auto_created_topic_gets_the_requested_queue_count_and_appears_in_the_topic_table(client):
    resp = await client.send("AutoTopic", 5, [message(b"x")], default_topic_queue_nums=6)
    assert resp.code == RC.SUCCESS, resp.remark
    cfg = (await client.topic_configs())["AutoTopic"]
    assert (cfg["readQueueNums"], cfg["writeQueueNums"], cfg["perm"]) == (6, 6, 6)


async def test_a_read_only_topic_refuses_sends_and_a_write_only_topic_refuses_pulls(client):
    await client.create_topic("ReadOnlyTopic", queues=1, perm=4)
    resp = await client.send("ReadOnlyTopic", 0, [message(b"x")])
    assert resp.code == RC.NO_PERMISSION and "not writable" in resp.remark
    await client.create_topic("WriteOnlyTopic", queues=1, perm=2)
    pulled = await client.pull("g-perm", "WriteOnlyTopic", 0, 0)
    assert pulled.code == RC.NO_PERMISSION and "not readable" in pulled.remark


@pytest.mark.parametrize(
    ("group", "topic", "queue_id", "max_nums", "subscription", "code", "remark_part"),
    [
        ("", "PullBad", 0, 32, "*", RC.INVALID_PARAMETER, "consumerGroup is missing"),
        ("g" * 121, "PullBad", 0, 32, "*", RC.INVALID_PARAMETER, "limit is 120"),
        ("g-ok", "NoSuchTopic", 0, 32, "*", RC.TOPIC_NOT_EXIST, "not exist"),
        ("g-ok", "PullBad", 9, 32, "*", RC.INVALID_PARAMETER, "0..1"),
        ("g-ok", "PullBad", -1, 32, "*", RC.INVALID_PARAMETER, "out of range"),
        ("g-ok", "PullBad", 0, 0, "*", RC.INVALID_PARAMETER, "maxMsgNums"),
        ("g-ok", "PullBad", 0, 32, "||", RC.SUBSCRIPTION_PARSE_FAILED, "names no tag"),
    ],
)
async def test_a_bad_pull_is_refused_with_its_code_and_a_hint(
    client, group, topic, queue_id, max_nums, subscription, code, remark_part
):
    await client.create_topic("PullBad", queues=2)
    got = await client.pull(group, topic, queue_id, 0, max_nums, subscription=subscription)
    assert got.code == code and remark_part in got.remark, got.remark


async def test_an_sql92_pull_is_refused_while_enable_property_filter_is_off(client):
    await client.create_topic("PullBad", queues=2)
    ext = {"consumerGroup": "g-sql", "topic": "PullBad", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
           "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
           "subscription": "a > 1", "expressionType": "SQL92"}
    resp = await client.request(RequestCode.PULL_MESSAGE, ext)
    assert resp.code == RC.SYSTEM_ERROR and "SQL92" in resp.remark and "enablePropertyFilter=true" in resp.remark


async def test_pulls_with_negative_or_huge_offsets_are_told_where_to_continue(client):
    await client.create_topic("OffsetEdge", queues=1)
    await client.send("OffsetEdge", 0, [message(b"a"), message(b"b")])
    for offset in (-1, 2**63 - 1):
        got = await client.pull("g-edge2", "OffsetEdge", 0, offset)
        assert got.code == RC.PULL_OFFSET_MOVED, got.remark
        assert 0 <= got.next_begin_offset <= 2
    huge = await client.pull("g-edge2", "OffsetEdge", 0, 0, max_nums=2**31 - 1)
    assert huge.code == RC.SUCCESS and len(huge.messages) == 2


async def test_a_negative_offset_commit_is_refused(client):
    ack = await client.commit_offset("g-neg", "OffsetEdge", 0, -5)
    assert ack.code == RC.INVALID_PARAMETER and "negative" in ack.remark


@pytest.mark.parametrize(
    ("code", "ext", "remark_part"),
    [
        (RequestCode.PULL_MESSAGE, {"topic": "T"}, "consumerGroup is missing"),
        (RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "T"}, "queueId is missing"),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": "٣"}, "not a decimal"),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": "1.5"}, "not a decimal"),
        (RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "99999999999"}, "does not fit"),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": "0",
                                              "commitOffset": " 5"}, "not a decimal"),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g", "delayLevel": "0"}, "offset is missing"),
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {}, "consumerGroup is missing"),
        (RequestCode.UNREGISTER_CLIENT, {}, "clientID is missing"),
    ],
)
async def test_a_missing_or_unparsable_header_field_is_answered_with_its_name(client, code, ext, remark_part):
    resp = await client.request(code, ext)
    assert resp.code == RC.INVALID_PARAMETER and remark_part in resp.remark, resp.remark


@pytest.mark.parametrize(
    ("topic", "queues", "perm", "remark_part"),
    [
        ("../etc", 1, 6, "letters"),
        ("SCHEDULE_TOPIC_XXXX", 1, 6, "system topic"),
        ("PermTopic", 1, 9, "perm 9"),
        ("ZeroQueues", 0, 6, "read_queue_nums"),
    ],
)
async def test_bad_topic_admin_requests_are_refused(client, topic, queues, perm, remark_part):
    ack = await client.create_topic(topic, queues=queues, perm=perm)
    assert ack.code != RC.SUCCESS and remark_part in ack.remark, ack.remark


async def test_deleting_a_system_topic_is_refused(client):
    ack = await client.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"})
    assert ack.code != RC.SUCCESS and "system topic" in ack.remark


async def test_an_unknown_request_code_is_answered_not_supported(client):
    resp = await client.request(9999, {})
    assert resp.code == RC.REQUEST_CODE_NOT_SUPPORTED and "9999" in resp.remark


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1,2]", b'{"clientID":""}', b'{"clientID":"c","consumerDataSet":[{"groupName":5}]}',
     b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":{"topic":"T"}}]}'],
)
async def test_a_heartbeat_that_is_not_heartbeat_data_is_refused(client, body):
    resp = await client.request(RequestCode.HEART_BEAT, body=body)
    assert resp.code == RC.INVALID_PARAMETER and resp.remark


async def test_commit_bits_from_a_producer_and_a_bad_end_transaction_are_refused(client):
    await client.create_topic("BadT", queues=4)
    sent = await client.send("BadT", 0, [message(b"x")], sys_flag=0x8)
    assert sent.code == RC.MESSAGE_ILLEGAL and "commit or rollback bits" in sent.remark
    end = {"producerGroup": "p", "tranStateTableOffset": "0", "commitLogOffset": str(2**40), "commitOrRollback": "8",
           "msgId": "x"}
    resp = await client.request(RequestCode.END_TRANSACTION, end)
    assert resp.code == RC.INVALID_PARAMETER and "outside the commitlog" in resp.remark
    resp = await client.request(RequestCode.END_TRANSACTION, {**end, "commitOrRollback": "5"})
    assert resp.code == RC.INVALID_PARAMETER and "send 8 (commit)" in resp.remark


async def test_frames_that_do_not_decode_close_their_connection_and_nothing_else(client, master):
    addr = master.addr
    length_past_cap = struct.pack(">i", 64 * 1024 * 1024) + b"\x00" * 8
    header_past_frame = struct.pack(">ii", 8, 100) + b"{}\x00\x00"
    unknown_type = struct.pack(">ii", 4, 7 << 24)
    not_an_object = struct.pack(">ii", 4 + 2, 2) + b"[]"
    for frame in (length_past_cap, header_past_frame, unknown_type, not_an_object):
        assert await raw_exchange(addr, frame) is None
    # extFields nested inside an object: the frame is sound, so the request is answered and not served
    nested = json_frame({"code": 30, "opaque": 1, "flag": 0, "extFields": {"topic": {"a": 1}}})
    answer = await raw_exchange(addr, nested)
    assert answer is not None and (answer.code, answer.opaque) == (RC.INVALID_PARAMETER, 1)
    assert "extFields['topic']" in answer.remark
    # scalar extFields of any JSON type are fine (the C++ client sends numbers)
    numbers = json_frame({"code": 30, "opaque": 7, "flag": 0, "extFields": {"topic": "BadT", "queueId": 0}})
    answer = await raw_exchange(addr, numbers)
    assert answer is not None and (answer.code, answer.opaque, answer.ext["offset"]) == (0, 7, "0")
    assert (await client.send("AfterBadFrames", 0, [message(b"fine")])).code == RC.SUCCESS


async def test_a_fast_port_serves_sends_but_not_pulls(tmp_path, namesrv):
    from tests.integration.broker.rpc import BrokerClient, make_broker

    fast_port = free_port()
    broker = make_broker(tmp_path, name="broker-fast", namesrv_addr=namesrv.addr, fastListenPort=fast_port).start()
    fast = BrokerClient(f"127.0.0.1:{fast_port}")
    try:
        sent = await fast.send("FastTopic", 0, [message(b"via the fast port")])
        assert sent.code == RC.SUCCESS, sent.remark
        pulled = await fast.pull("g-fast", "FastTopic", 0, 0)
        assert pulled.code == RC.REQUEST_CODE_NOT_SUPPORTED
        main = BrokerClient(broker.addr)
        assert [m.body for m in (await main.pull("g-fast", "FastTopic", 0, 0)).messages] == [b"via the fast port"]
        await main.close()
    finally:
        await fast.close()
        broker.stop()


async def test_the_broker_still_serves_after_all_the_bad_inputs(client):
    resp = await client.send("AfterBadTopic", 0, [message(b"fine")])
    assert resp.code == RC.SUCCESS
    assert await max_offset(client, "BadT") == 0

