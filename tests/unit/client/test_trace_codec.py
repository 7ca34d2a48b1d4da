"""RocketMQ's trace encoding (client.trace_codec): the field order of each record type, the round trip, the
readers' tolerance of RocketMQ's older and newer Pub layouts, and packing into trace messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.trace_codec import (
    CONTENT_SPLITOR,
    FIELD_SPLITOR,
    ConsumeReturnType,
    MessageType,
    TraceCodecError,
    TraceRecord,
    TraceType,
    decode,
    encode,
    encode_record,
    pack,
    trace_keys,
)

MSG_ID = "7F0000010A2B18B4AAC2" + "5C8E3D2A0001"


def fields(text: str) -> list[str]:
    assert text.endswith(FIELD_SPLITOR)
    return text[:-1].split(CONTENT_SPLITOR)


def test_pub_fields_are_in_rocketmqs_order():
    r = TraceRecord(TraceType.PUB, 1700000000123, "DefaultRegion", "PG", topic="T", msg_id=MSG_ID, tags="TagA",
                    keys="k1 k2", store_host="10.0.0.1:10911", body_length=11, cost_ms=7,
                    msg_type=MessageType.DELAY, offset_msg_id="0A00000100002A9F0000000000000010", success=True)
    assert fields(encode_record(r)) == [
        "Pub", "1700000000123", "DefaultRegion", "PG", "T", MSG_ID, "TagA", "k1 k2", "10.0.0.1:10911", "11", "7",
        "3", "0A00000100002A9F0000000000000010", "true"]


def test_sub_before_and_sub_after_fields_are_in_rocketmqs_order():
    before = TraceRecord(TraceType.SUB_BEFORE, 5, "DefaultRegion", "CG", request_id="R1", msg_id=MSG_ID,
                         retry_times=2, keys="k")
    after = TraceRecord(TraceType.SUB_AFTER, 9, request_id="R1", msg_id=MSG_ID, cost_ms=4, success=False,
                        keys="k", context_code=ConsumeReturnType.FAILED)
    assert fields(encode_record(before)) == ["SubBefore", "5", "DefaultRegion", "CG", "R1", MSG_ID, "2", "k"]
    assert fields(encode_record(after)) == ["SubAfter", "R1", MSG_ID, "4", "false", "k", "4", "9"]


def test_empty_text_is_written_as_javas_null_and_read_back_empty():
    r = TraceRecord(TraceType.SUB_BEFORE, 1, group="CG", request_id="R", msg_id=MSG_ID)
    assert fields(encode_record(r))[-1] == "null"
    assert decode(encode_record(r)) == [r]


def test_older_and_newer_pub_layouts_are_read():
    base = ["Pub", "1", "R", "PG", "T", MSG_ID, "null", "null", "h:1", "3", "4", "0"]
    old = CONTENT_SPLITOR.join([*base, "false"]) + FIELD_SPLITOR  # 13 fields: no offsetMsgId
    new = CONTENT_SPLITOR.join([*base, "OFF", "TRUE", "10.1.1.1"]) + FIELD_SPLITOR  # 15: the client host
    (a,), (b,) = decode(old), decode(new)
    assert (a.offset_msg_id, a.success, a.client_host) == ("", False, "")
    assert (b.offset_msg_id, b.success, b.client_host) == ("OFF", True, "10.1.1.1")


def test_unknown_types_are_skipped_and_malformed_known_ones_refused():
    end_tx = CONTENT_SPLITOR.join(["EndTransaction", "1", "R", "PG", "T", MSG_ID]) + FIELD_SPLITOR
    assert decode(end_tx) == []
    with pytest.raises(TraceCodecError, match="timestamp"):
        decode(CONTENT_SPLITOR.join(["SubBefore", "x", "R", "G", "Q", MSG_ID, "0", "k"]))
    with pytest.raises(TraceCodecError, match="8 are needed"):
        decode(CONTENT_SPLITOR.join(["SubBefore", "1", "R"]))


def test_a_separator_inside_a_field_is_refused():
    with pytest.raises(TraceCodecError, match="separators"):
        encode_record(TraceRecord(TraceType.PUB, group="a\x01b"))


def test_keys_are_msg_ids_and_keys_without_duplicates():
    rs = [TraceRecord(TraceType.SUB_BEFORE, msg_id="A", keys="k1 k2"), TraceRecord(TraceType.SUB_AFTER, msg_id="A",
                                                                                  keys="k1 k2"),
          TraceRecord(TraceType.PUB, msg_id="B")]
    assert trace_keys(rs) == ["A", "k1", "k2", "B"]


text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
               max_size=20).filter(lambda s: s != "null")
ints = st.integers(min_value=0, max_value=2**62)
small = st.integers(min_value=0, max_value=2**31 - 1)
pub = st.builds(TraceRecord, st.just(TraceType.PUB), ints, text, text, topic=text, msg_id=text, tags=text,
                keys=text, store_host=text, body_length=small, cost_ms=small,
                msg_type=st.sampled_from(list(MessageType)), offset_msg_id=text, success=st.booleans(),
                client_host=text)
sub_before = st.builds(TraceRecord, st.just(TraceType.SUB_BEFORE), ints, text, text, request_id=text,
                       msg_id=text, retry_times=small, keys=text)
sub_after = st.builds(TraceRecord, st.just(TraceType.SUB_AFTER), ints, request_id=text, msg_id=text,
                      cost_ms=small, success=st.booleans(), keys=text,
                      context_code=st.sampled_from(list(ConsumeReturnType)))


@given(st.lists(st.one_of(pub, sub_before, sub_after), max_size=20))
def test_round_trip(records):
    assert decode(encode(records)) == records


@given(st.lists(st.one_of(pub, sub_before, sub_after), max_size=30), st.integers(min_value=1, max_value=600))
def test_pack_keeps_every_record_in_order_within_the_size(records, max_bytes):
    packed = pack(records, max_bytes)
    assert [r for body, _ in packed for r in decode(body)] == records
    for body, keys in packed:
        # only a record larger than the limit on its own makes a longer message
        assert len(body.encode()) <= max_bytes or body.count(FIELD_SPLITOR) == 1
        assert keys == trace_keys(decode(body))
