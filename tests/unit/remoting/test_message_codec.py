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


def test_properties_string_follows_java_4_9_7():
    props = {"TAGS": "t", "KEYS": "k1 k2"}
    assert properties_to_string(props) == "TAGS\x01t\x02KEYS\x01k1 k2"  # no trailing \x02
    assert encode_properties(props) == b"TAGS\x01t\x02KEYS\x01k1 k2\x02"  # the stored form ends with one
    assert properties_to_string({}) == "" and encode_properties({}) == b""
    assert properties_to_string({"A": "1", "B": None}) == "A\x011"  # Java skips null values


def test_properties_parser_accepts_a_trailing_separator_or_none_and_drops_empty_names_and_values():
    expected = {"TAGS": "t", "KEYS": "k"}
    assert string_to_properties("TAGS\x01t\x02KEYS\x01k") == expected
    assert string_to_properties("TAGS\x01t\x02KEYS\x01k\x02") == expected
    assert string_to_properties("\x01v\x02E\x01\x02NOSEP\x02\x02TAGS\x01t\x02KEYS\x01k") == expected
    assert string_to_properties("A\x01x\x01y\x02A\x01z") == {"A": "z"}  # first \x01 splits; later names win
    assert string_to_properties("") == {} and decode_properties(b"") == {}
    assert decode_properties(b"T\x01\xff\x02") == {"T": "\ufffd"}  # bad UTF-8 is replaced, as Java's new String


def test_property_encoders_refuse_the_separators():
    for bad in ({"A\x01": "v"}, {"A": "v\x02w"}, {"A": "\x01"}):
        with pytest.raises(MessageCodecError, match="separators"):
            properties_to_string(bad)
        with pytest.raises(MessageCodecError, match="separators"):
            encode_properties(bad)


prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
prop_dicts = st.dictionaries(prop_text, prop_text, max_size=6)


def _java_view(props: dict[str, str]) -> dict[str, str]:
    """What a Java reader keeps of a map: pairs with a non-empty name and value."""
    return {k: v for k, v in props.items() if k and v}


@settings(max_examples=300, deadline=None)
@given(prop_dicts)
def test_properties_round_trip(props):
    assert decode_properties(encode_properties(props)) == _java_view(props)
    assert string_to_properties(properties_to_string(props)) == _java_view(props)
    assert decode_properties(properties_to_string(props).encode()) == _java_view(props)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("ab\x01\x02\u00e9"), max_size=30))
def test_properties_parser_takes_any_text(text):
    out = string_to_properties(text)
    assert all(k and v and "\x02" not in k + v and "\x01" not in k for k, v in out.items())


@settings(max_examples=200, deadline=None)
@given(
    topic=st.from_regex(r"[a-zA-Z0-9_%|-]{1,127}", fullmatch=True),
    body=st.binary(min_size=1, max_size=2000),
    props=st.dictionaries(prop_text, prop_text, max_size=4),
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
    assert msg.body == body and msg.properties == _java_view(props) and msg.store_size == len(data)
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


def test_offset_msg_id_round_trips_and_refuses_other_shapes():
    mid = "C0A8010200002A9F00000000000003E8"
    assert parse_offset_msg_id(mid) == (("192.168.1.2", 10911), 1000)
    assert record.offset_msg_id(("192.168.1.2", 10911), 1000) == mid
    for bad in ("", mid[:-1], mid + "00", "Z" * 32):
        with pytest.raises(MessageCodecError, match="offset msgId"):
            parse_offset_msg_id(bad)


@given(st.tuples(*[st.integers(0, 255)] * 4), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
def test_offset_msg_ids_round_trip(ip, port, offset):
    host = (".".join(map(str, ip)), port)
    assert parse_offset_msg_id(record.offset_msg_id(host, offset)) == (host, offset)


def test_java_string_hash_and_tag_filter():
    assert record.java_string_hash("") == 0
    assert record.java_string_hash("TagA") == 2598919  # "TagA".hashCode() in Java
    assert record.java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    f = record.TagFilter(" TagA || TagB ")
    assert f.match_tags("TagA") and not f.match_tags("TagC") and f.match_code(2598919)
    assert record.TagFilter(None).match_all and record.TagFilter("*").match_tags("anything")


HEX = set("0123456789ABCDEF")


def _generator(epoch_ms: int = 1_000) -> record.UniqIdGenerator:
    return record.UniqIdGenerator(record.uniq_id_prefix("10.1.2.3", 0x12345, b"\xde\xad\xbe\xef"), epoch_ms)


def test_uniq_ids_are_32_upper_hex_with_a_20_character_process_prefix():
    gen = _generator()
    assert gen.prefix == "0A0102032345DEADBEEF"  # IPv4, pid & 0xFFFF, nonce
    mid = gen.next_id(gen.epoch_ms + 5)
    assert len(mid) == 32 and set(mid) <= HEX
    assert mid == "0A0102032345DEADBEEF" + "00000005" + "0000"
    assert record.uniq_id_prefix("not-an-ip", 1, bytes(4))[:8] == "7F000001"  # loopback when there is no IPv4
    with pytest.raises(ValueError):
        record.uniq_id_prefix("10.1.2.3", 1, b"\x00")
    with pytest.raises(ValueError):
        record.UniqIdGenerator("ABC", 0)


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=300))
def test_uniq_ids_of_one_generator_never_repeat_below_65536_per_millisecond(offsets):
    gen = _generator()
    ids = [gen.next_id(gen.epoch_ms + ms) for ms in offsets]
    assert len(set(ids)) == len(ids)
    for ms, mid in zip(offsets, ids, strict=True):
        assert int(mid[20:28], 16) == ms


def test_the_uniq_id_counter_wraps_at_16_bits_and_time_wraps_at_32_bits():
    gen = _generator()
    first = [gen.next_id(gen.epoch_ms) for _ in range(65_537)]
    assert first[0][28:] == first[-1][28:]  # the 65,537th id of one millisecond repeats the counter
    assert gen.next_id(gen.epoch_ms + 2**32 + 7)[20:28] == "00000007"
