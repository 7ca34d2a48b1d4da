"""Pure pieces of the v2 endpoint: message conversion both ways, delay levels, status mapping."""

from __future__ import annotations

import zlib

import pytest

from broker.grpc_v2 import codes
from broker.grpc_v2.convert import BadMessage, Unconvertible, delay_level, to_draft, to_proto
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.store.types import PutStatus
from remoting.message_codec import StoredMessage

LEVELS = [1000, 5000, 10_000, 30_000]


def _msg(**sp) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name="t"), body=b"hello", system_properties=pb.SystemProperties(**sp))
    m.user_properties["color"] = "red"
    return m


def _draft(m: pb.Message, now_ms: int = 1_000_000):
    return to_draft(m, born_host=("10.0.0.1", 0), levels_ms=LEVELS, max_body=100, now_ms=now_ms, cluster="c")


def test_a_message_becomes_rocketmq_properties():
    d = _draft(_msg(message_id="ID1", tag="TagA", keys=["k1", "k2"], message_group="g1"))
    assert d.properties == {"color": "red", "UNIQ_KEY": "ID1", "TAGS": "TagA", "KEYS": "k1 k2",
                            "__SHARDINGKEY": "g1", "CLUSTER": "c"}
    assert d.body == b"hello" and d.born_host == ("10.0.0.1", 0)


def test_delivery_timestamp_picks_the_smallest_level_not_shorter_and_refuses_past_the_highest():
    assert [delay_level(ms, LEVELS) for ms in (-5, 0, 1, 1000, 1001, 30_000)] == [0, 0, 1, 1, 2, 4]
    assert delay_level(30_001, LEVELS) == -1
    m = _msg(message_id="ID1")
    m.system_properties.delivery_timestamp.seconds = 1_006  # 6 s after now
    d = _draft(m)
    assert d.properties["DELAY"] == "3" and d.properties["TIMER_DELIVER_MS"] == "1006000"
    m.system_properties.delivery_timestamp.seconds = 2_000
    with pytest.raises(BadMessage) as err:
        _draft(m)
    assert err.value.code == pb.Code.ILLEGAL_DELIVERY_TIME


@pytest.mark.parametrize(("change", "code"), [
    ({"body": b""}, pb.Code.BAD_REQUEST),
    ({"body": b"x" * 101}, pb.Code.MESSAGE_BODY_TOO_LARGE),
    ({"message_id": ""}, pb.Code.ILLEGAL_MESSAGE_ID),
    ({"tag": "a||b"}, pb.Code.ILLEGAL_MESSAGE_TAG),
    ({"prop": ("UNIQ_KEY", "x")}, pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"prop": ("a\x01", "x")}, pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    # RocketMQ's system properties are no user properties (issue 22 item 5): a consumer would parse them
    ({"prop": ("TIMER_DELAY_SEC", "²")}, pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"prop": ("RECONSUME_TIME", "1")}, pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"prop": ("__STARTDELIVERTIME", "1")}, pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ({"message_id": "M" * 129}, pb.Code.ILLEGAL_MESSAGE_ID),
    ({"delivery_s": -5}, pb.Code.ILLEGAL_DELIVERY_TIME),
    ({"born_s": -5}, pb.Code.BAD_REQUEST),
    ({"born_s": 253_402_300_800}, pb.Code.BAD_REQUEST),
])
def test_bad_messages_are_refused_with_the_v2_code(change, code):
    m = _msg(message_id=change.get("message_id", "ID1"), tag=change.get("tag", "t"))
    if "body" in change:
        m.body = change["body"]
    if "prop" in change:
        m.user_properties[change["prop"][0]] = change["prop"][1]
    if "delivery_s" in change:
        m.system_properties.delivery_timestamp.seconds = change["delivery_s"]
    if "born_s" in change:
        m.system_properties.born_timestamp.seconds = change["born_s"]
    with pytest.raises(BadMessage) as err:
        _draft(m)
    assert err.value.code == code


def test_a_stored_record_becomes_the_message_a_consumer_receives():
    stored = StoredMessage("%RETRY%g_t", 0, 7, 1234, 200, b"hello",
                           {"UNIQ_KEY": "ID1", "TAGS": "TagA", "KEYS": "k1 k2", "color": "red"},
                           0, 0, 1_000, ("10.0.0.1", 5), 2_000, ("127.0.0.1", 10911), 2, 0)
    m = to_proto(stored, topic="t", receipt_handle="H", invisible_ms=15_000, store_host="b")
    sp = m.system_properties
    assert (m.topic.name, sp.message_id, sp.tag, list(sp.keys)) == ("t", "ID1", "TagA", ["k1", "k2"])
    assert sp.delivery_attempt == 3 and sp.receipt_handle == "H" and sp.body_encoding == pb.Encoding.IDENTITY
    assert sp.body_digest.checksum == "3610A686" and dict(m.user_properties) == {"color": "red"}


def test_weak_stored_statuses_are_never_ok_and_say_stored():
    for put, code in [(PutStatus.FLUSH_SLAVE_TIMEOUT, pb.Code.SLAVE_PERSISTENCE_TIMEOUT),
                      (PutStatus.SLAVE_NOT_AVAILABLE, pb.Code.HA_NOT_AVAILABLE),
                      (PutStatus.FLUSH_DISK_TIMEOUT, pb.Code.MASTER_PERSISTENCE_TIMEOUT)]:
        st = codes.put_status(put)
        assert st.code == code and "stored on the master" in st.message
    assert codes.put_status(PutStatus.PUT_OK).code == pb.Code.OK


def _stored(props=None, born_ms=1_000, reconsume=0, body=b"hello", sys_flag=0) -> StoredMessage:
    return StoredMessage("t", 0, 7, 1234, 200, body, {"UNIQ_KEY": "ID1", **(props or {})}, 0, sys_flag, born_ms,
                         ("10.0.0.1", 5), 2_000, ("127.0.0.1", 10911), reconsume, 0)


@pytest.mark.parametrize(("stored", "part"), [
    (_stored({"TIMER_DELIVER_MS": "²"}), "TIMER_DELIVER_MS='²'"),
    (_stored({"TIMER_DELIVER_MS": "٣"}), "TIMER_DELIVER_MS='٣'"),  # int() would have made it 3
    (_stored({"TIMER_DELIVER_MS": "-1"}), "TIMER_DELIVER_MS=-1"),
    (_stored(born_ms=-(10**17)), "bornTimestamp"),
    (_stored(reconsume=2**31 - 1), "reconsumeTimes"),
    (_stored(body=b"not zlib", sys_flag=0x1), "does not inflate"),
    (_stored(body=zlib.compress(b"x" * 5000), sys_flag=0x1), "inflates past 4096 bytes"),
    (_stored(body=zlib.compress(b"x" * 50)[:-4], sys_flag=0x301), "ends before"),
])
def test_a_record_a_v2_consumer_cannot_take_raises_unconvertible_naming_the_field(stored, part):
    """The receive path turns this into that one message's problem (to the DLQ), never the queue's."""
    with pytest.raises(Unconvertible, match=part.replace("(", r"\(")):
        to_proto(stored, topic="t", receipt_handle="H", invisible_ms=15_000, store_host="b", max_inflated=4096)


def test_a_zlib_body_is_handed_out_inflated_and_lz4_as_stored():
    """RocketMQ 4 producers compress bodies over 4 KiB; RocketMQ's proxy gives v2 consumers the inflated body."""
    text = b"a RocketMQ 4 producer compressed this " * 200
    for flag in (0x1, 0x301):
        m = to_proto(_stored(body=zlib.compress(text), sys_flag=flag), topic="t", receipt_handle="H",
                     invisible_ms=15_000, store_host="b")
        assert m.body == text and m.system_properties.body_digest.checksum == format(zlib.crc32(text), "08X")
        assert m.system_properties.body_encoding == pb.Encoding.IDENTITY
    lz4 = b"\x04\x22\x4d\x18frame"
    assert to_proto(_stored(body=lz4, sys_flag=0x101), topic="t", receipt_handle="H", invisible_ms=15_000,
                    store_host="b").body == lz4
