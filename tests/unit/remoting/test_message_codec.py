"""Message codec: stored records (golden bytes against spec remoting.md §4.5, round trips, the validator's four
answers), properties strings (§3.3), msgIds and UNIQ_KEYs (§6.5)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting import message_codec as record
from remoting.message_codec import (
    MIN_RECORD_SIZE,
    MessageCodecError,
    RecordError,
    RecordStatus,
    blank_record,
    check_record,
    decode,
    decode_properties,
    encode_properties,
    encode_record,
    host_bytes,
    iter_records,
    parse_host,
    parse_offset_msg_id,
    properties_to_string,
    string_to_properties,
    validate_topic,
)

GOLDEN_FIELDS = {
    "topic_bytes": b"T1",
    "queue_id": 3,
    "flag": 7,
    "queue_offset": 5,
    "physical_offset": 1000,
    "sys_flag": 0,
    "born_timestamp": 0x0102030405060708,
    "born_host": host_bytes("10.0.0.1", 9876),
    "store_timestamp": 0x1112131415161718,
    "store_host": host_bytes("192.168.1.2", 10911),
    "reconsume_times": 2,
    "body": b"abc",
    "properties": encode_properties({"TAGS": "x"}),
}

# Written by hand from the spec table, one field per line.
GOLDEN_HEX = (
    "00000067"  # 0   TOTALSIZE = 91 + 3 + 2 + 7
    "DAA320A7"  # 4   MAGICCODE
    "352441C2"  # 8   BODYCRC = crc32(b"abc") & 0x7FFFFFFF
    "00000003"  # 12  QUEUEID
    "00000007"  # 16  FLAG
    "0000000000000005"  # 20 QUEUEOFFSET
    "00000000000003E8"  # 28 PHYSICALOFFSET
    "00000000"  # 36  SYSFLAG
    "0102030405060708"  # 40 BORNTIMESTAMP
    "0A00000100002694"  # 48 BORNHOST 10.0.0.1:9876
    "1112131415161718"  # 56 STORETIMESTAMP
    "C0A8010200002A9F"  # 64 STOREHOST 192.168.1.2:10911
    "00000002"  # 72  RECONSUMETIMES
    "0000000000000000"  # 76 PREPARED TRANSACTION OFFSET
    "00000003"  # 84  BODYLENGTH
    "616263"  # 88  body
    "02"
    "5431"  # 91 TOPICLENGTH, topic
    "0007"
    "5441475301"
    "7802"  # 94 PROPERTIESLENGTH, "TAGS\x01x\x02"
)


def test_golden_record_matches_the_spec_layout_byte_for_byte():
    data = encode_record(**GOLDEN_FIELDS)
    assert data.hex().upper() == GOLDEN_HEX
    assert len(data) == 103 == MIN_RECORD_SIZE + 3 + 2 + 7
    assert int.from_bytes(data[8:12], "big") == zlib.crc32(b"abc") & 0x7FFFFFFF


def test_golden_record_decodes_to_its_fields():
    msg = decode(bytes.fromhex(GOLDEN_HEX), check_crc=True)
    assert (msg.topic, msg.queue_id, msg.flag, msg.queue_offset, msg.physical_offset) == ("T1", 3, 7, 5, 1000)
    assert msg.born_host == ("10.0.0.1", 9876) and msg.store_host == ("192.168.1.2", 10911)
    assert msg.born_timestamp == 0x0102030405060708 and msg.store_timestamp == 0x1112131415161718
    assert msg.reconsume_times == 2 and msg.body == b"abc" and msg.tags == "x" and msg.store_size == 103
    assert msg.offset_msg_id == "C0A8010200002A9F00000000000003E8"


def test_blank_record_is_remaining_size_then_blank_magic():
    assert blank_record(4096).hex().upper() == "00001000CBD43194"
    res = check_record(blank_record(4096) + bytes(4088), 0)
    assert res.status is RecordStatus.BLANK and res.size == 4096


def test_check_record_tells_incomplete_from_corrupt():
    data = bytes.fromhex(GOLDEN_HEX)
    for cut in range(len(data)):
        assert check_record(data[:cut], 0).status is RecordStatus.INCOMPLETE, cut
    assert check_record(bytes(16), 0).status is RecordStatus.CORRUPT
    assert check_record(b"\xff" * 200, 0).status is RecordStatus.CORRUPT
    bad_len = bytearray(data)
    bad_len[87] = 4  # BODYLENGTH no longer agrees with TOTALSIZE
    assert check_record(bytes(bad_len), 0).status is RecordStatus.CORRUPT
    bad_crc = bytearray(data)
    bad_crc[88] ^= 0xFF
    assert check_record(bytes(bad_crc), 0, check_crc=True).status is RecordStatus.CORRUPT
    assert check_record(bytes(bad_crc), 0, check_crc=False).status is RecordStatus.VALID


def test_decode_names_the_offset_of_garbage():
    with pytest.raises(RecordError) as err:
        decode(b"\x00" * 8 + bytes.fromhex(GOLDEN_HEX)[:50], 8)
    assert err.value.offset == 8 and "record" in str(err.value)


def test_iter_records_refuses_a_torn_tail():
    data = bytes.fromhex(GOLDEN_HEX) * 3
    assert [m.topic for m in iter_records(data)] == ["T1"] * 3
    with pytest.raises(RecordError):
        list(iter_records(data[:-1]))


def test_hosts_round_trip_and_non_ipv4_becomes_zero():
    assert parse_host(host_bytes("127.0.0.1", 10911)) == ("127.0.0.1", 10911)
    assert parse_host(host_bytes("broker-a", 1)) == ("0.0.0.0", 1)


def test_topic_rules_follow_rocketmq():
    assert validate_topic("Topic_A-1%|x") is None
    assert "empty" in validate_topic("")
    assert "letters" in validate_topic("bad topic")
    assert validate_topic("a" * 127) is None and "127" in validate_topic("a" * 128)
    assert validate_topic("%RETRY%" + "g" * 200) is None
    assert "255" in validate_topic("%DLQ%" + "g" * 251)


def test_property_value_reads_one_key_without_a_dict():
    raw = encode_properties({"KEYS": "k1", "TAGS": "t", "XTAGS": "no"})
    assert record.property_value(raw, "TAGS") == "t"
    assert record.property_value(raw, "KEYS") == "k1"
    assert record.property_value(raw, "NOPE") is None


prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(prop_text.filter(bool), prop_text, max_size=6))
def test_properties_round_trip(props):
    assert decode_properties(encode_properties(props)) == props


@settings(max_examples=200, deadline=None)
@given(
    topic=st.from_regex(r"[a-zA-Z0-9_%|-]{1,127}", fullmatch=True),
    body=st.binary(min_size=1, max_size=2000),
    props=st.dictionaries(prop_text.filter(bool), prop_text, max_size=4),
    ints=st.tuples(
        st.integers(0, 2**31 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**31 - 1),
    ),
)
def test_records_round_trip_and_concatenate(topic, body, props, ints):
    qid, flag, qoff, phy, ts, reconsume = ints
    fields = dict(
        GOLDEN_FIELDS,
        topic_bytes=topic.encode(),
        queue_id=qid,
        flag=flag,
        queue_offset=qoff,
        physical_offset=phy,
        store_timestamp=ts,
        born_timestamp=ts,
        reconsume_times=reconsume,
        body=body,
        properties=encode_properties(props),
    )
    data = encode_record(**fields)
    msg = decode(data, check_crc=True)
    assert (msg.topic, msg.queue_id, msg.flag, msg.queue_offset, msg.physical_offset) == (topic, qid, flag, qoff, phy)
    assert msg.body == body and msg.properties == props and msg.store_size == len(data)
    assert [m.body for m in iter_records(data + data)] == [body, body]
    res = check_record(data, 0, check_crc=True)
    assert res.status is RecordStatus.VALID and res.info.queue_offset == qoff and res.size == len(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_check_record_never_raises_on_garbage(data):
    res = check_record(data, 0, check_crc=True)
    assert res.status in RecordStatus


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 102), st.binary(min_size=1, max_size=8))
def test_decode_raises_record_error_and_nothing_else_on_damaged_records(prefix, at, junk):
    data = bytearray(bytes.fromhex(GOLDEN_HEX))
    data[at : at + len(junk)] = junk
    for buf in (bytes(data), prefix):
        try:
            msg = decode(buf, check_crc=True)
        except RecordError:
            continue
        assert msg.store_size == len(buf) or msg.store_size <= len(buf)
