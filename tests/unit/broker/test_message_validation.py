"""The message rules every sender is held to (issue 22 items 5 and 8): ``broker.processors.validate`` checks a send
header's numbers and sysFlag, every system property RocketMQ or pyrmq parses (strict ASCII decimal, in range), and
a body flagged as compressed; the remoting processor and the v2 SendMessage both call it."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.processors import validate as v
from remoting.codes import ResponseCode as RC
from remoting.message_codec import encode_properties, properties_to_string

MAX = 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("props", "remark_part"),
    [
        ({"TIMER_DELIVER_MS": "²"}, "TIMER_DELIVER_MS='²' is not a decimal number"),
        ({"TIMER_DELIVER_MS": "٣"}, "not a decimal number"),
        ({"TIMER_DELIVER_MS": "99999999999999999"}, "out of range"),
        ({"TIMER_DELAY_SEC": "1.5"}, "TIMER_DELAY_SEC"),
        ({"TIMER_DELAY_MS": " 5"}, "TIMER_DELAY_MS"),
        ({"DELAY": "+1"}, "has a sign"),
        ({"DELAY": "-1"}, "is negative; send a delay level"),
        ({"DELAY": "soon"}, "delay level"),
        ({"REAL_QID": "-3"}, "REAL_QID"),
        ({"MAX_OFFSET": "1e9"}, "MAX_OFFSET"),
        ({"MIN_OFFSET": "x"}, "MIN_OFFSET"),
        ({"__STARTDELIVERTIME": "²"}, "__STARTDELIVERTIME"),
        ({"RECONSUME_TIME": "99999999999"}, "RECONSUME_TIME"),
        ({"MAX_RECONSUME_TIMES": "-2"}, "out of range"),
        ({"RETRY_TOPIC": "no spaces allowed"}, "RETRY_TOPIC"),
        ({"TRAN_MSG": "TRUE"}, "no transactions"),
        ({"UNIQ_KEY": "u" * (v.MAX_UNIQ_KEY_LEN + 1)}, "limit is 128"),
    ],
)
def test_a_bad_system_property_is_refused_naming_it_in_every_form(props, remark_part):
    text = properties_to_string({"KEYS": "k", **props})
    for bad in (v.properties_text(text), v.properties_bytes(encode_properties({"KEYS": "k", **props})),
                v.properties_dict({"KEYS": "k", **props})):
        assert bad is not None and bad.code == RC.MESSAGE_ILLEGAL and remark_part in bad.remark, bad


def test_an_empty_delay_is_refused_though_the_parser_would_drop_it():
    bad = v.properties_text("DELAY\x01\x02KEYS\x01k")
    assert bad is not None and "DELAY is empty" in bad.remark


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"UNIQ_KEY": "7F0000017A2C18B4AAC2", "TAGS": "t", "KEYS": "a b", "WAIT": "true"},
        {"DELAY": "0"}, {"DELAY": "3"}, {"DELAY": "99"},  # above the highest level: the store clamps it, as RocketMQ
        {"TIMER_DELIVER_MS": "1700000000000"}, {"MAX_RECONSUME_TIMES": "-1"}, {"REAL_QID": "0"},
        {"TRAN_MSG": "false"}, {"RETRY_TOPIC": "Orders"}, {"UNIQ_KEY": "u" * v.MAX_UNIQ_KEY_LEN},
        {"MYDELAY": "x", "TIMER_DELIVER_MSX": "²"},  # user names that only contain a checked one
    ],
)
def test_good_properties_pass_in_every_form(props):
    assert v.properties_text(properties_to_string(props)) is None
    assert v.properties_bytes(encode_properties(props)) is None
    assert v.properties_dict(props) is None


def test_a_batch_names_the_message_with_the_bad_property():
    parts = [encode_properties({"KEYS": "a"}), encode_properties({"TIMER_DELIVER_MS": "²"})]
    bad = v.properties_bytes(b"\x02".join(parts), parts)
    assert bad is not None and bad.remark.startswith("message 1: TIMER_DELIVER_MS")


_names = st.sampled_from(sorted(v.NUMERIC_PROPERTIES))


@given(_names, st.text(max_size=24))
def test_a_numeric_property_passes_exactly_when_it_is_plain_ascii_decimal_in_range(name, value):
    lo, hi = v.NUMERIC_PROPERTIES[name]
    body = value[1:] if value[:1] == "-" and lo < 0 else value
    plain = body != "" and body.isascii() and body.isdigit() and lo <= int(value) <= hi
    if "\x01" in value or "\x02" in value:
        return  # a separator: the encoders refuse it before these rules
    assert (v.properties_dict({name: value}) is None) == plain
    assert (v.properties_text(f"{name}\x01{value}") is None) == plain
    assert (v.properties_bytes(f"K\x01v\x02{name}\x01{value}".encode()) is None) == plain


@given(st.integers(min_value=0, max_value=v.NUMERIC_PROPERTIES["TIMER_DELIVER_MS"][1]))
def test_every_time_in_range_passes(ms):
    assert v.properties_text(f"TIMER_DELIVER_MS\x01{ms}") is None


@pytest.mark.parametrize(
    ("flag", "remark_part"),
    [
        (0x800, "bits RocketMQ does not define"),
        (-1, "bits RocketMQ does not define"),
        (v.BORNHOST_V6_FLAG, "BORNHOST_V6_FLAG"),
        (v.STOREHOSTADDRESS_V6_FLAG, "STOREHOSTADDRESS_V6_FLAG"),
        (v.INNER_BATCH_FLAG, "inner batches"),
        (v.NEED_UNWRAP_FLAG, "inner batches"),
        (v.COMPRESSION_ZLIB, "without COMPRESSED_FLAG"),
        (0x401, "compression type 4"),
    ],
)
def test_a_sys_flag_with_bits_the_client_must_not_set_is_refused(flag, remark_part):
    bad = v.sys_flag(flag)
    assert bad is not None and bad.code == RC.MESSAGE_ILLEGAL and remark_part in bad.remark


@pytest.mark.parametrize("flag", [0, v.COMPRESSED_FLAG, v.MULTI_TAGS_FLAG, v.COMPRESSED_FLAG | v.COMPRESSION_ZLIB,
                                  v.COMPRESSED_FLAG | v.COMPRESSION_LZ4, v.COMPRESSED_FLAG | v.COMPRESSION_ZSTD,
                                  0x4, 0xC])  # transaction bits: send_admit refuses them with its own remark
def test_the_flags_clients_set_pass(flag):
    assert v.sys_flag(flag) is None


def test_a_compressed_body_must_be_one_whole_zlib_stream_within_the_inflate_limit():
    good = zlib.compress(b"payload " * 1000)
    assert v.compressed_body(good, v.COMPRESSED_FLAG, MAX) == 8000  # its inflated size, counted against a budget
    assert v.compressed_body(good, v.COMPRESSED_FLAG | v.COMPRESSION_ZLIB, MAX) == 8000
    assert v.compressed_body(b"not zlib at all", 0, MAX) == 0  # not flagged: nothing to check
    for body, part in [(b"not zlib at all", "does not inflate"), (good[:-3], "ends before"), (b"", "ends before"),
                       (good + b"junk", "bytes after"), (zlib.compress(b"\0" * (9 * 1024 * 1024)), "inflates past")]:
        bad = v.compressed_body(body, v.COMPRESSED_FLAG, 8 * 1024 * 1024, index=2)
        assert isinstance(bad, v.Rejection) and part in bad.remark and bad.remark.startswith("message 2:"), (part, bad)


def test_a_big_inflation_stops_at_max_inline_so_the_rest_runs_off_the_event_loop():
    bomb = zlib.compress(b"\0" * (4 * 1024 * 1024))  # 4 KiB that inflate to 4 MiB
    assert v.compressed_body(bomb, v.COMPRESSED_FLAG, MAX, max_inline=1 << 20) is v.MORE
    assert v.compressed_body(bomb, v.COMPRESSED_FLAG, MAX) == 4 * 1024 * 1024


def test_lz4_and_zstd_bodies_need_their_frame_magic():
    assert v.compressed_body(b"\x04\x22\x4d\x18rest", v.COMPRESSED_FLAG | v.COMPRESSION_LZ4, MAX) == 0
    assert v.compressed_body(b"\x28\xb5\x2f\xfdrest", v.COMPRESSED_FLAG | v.COMPRESSION_ZSTD, MAX) == 0
    bad = v.compressed_body(zlib.compress(b"x"), v.COMPRESSED_FLAG | v.COMPRESSION_ZSTD, MAX)
    assert isinstance(bad, v.Rejection) and "zstd frame" in bad.remark


@pytest.mark.parametrize(
    ("ext", "short", "born", "code", "part"),
    [
        ({"queueId": "+1"}, False, 1, RC.INVALID_PARAMETER, "queueId='+1' has a sign"),
        ({"e": "+1"}, True, 1, RC.INVALID_PARAMETER, "queueId='+1'"),
        ({"f": "+0"}, True, 1, RC.INVALID_PARAMETER, "sysFlag"),
        ({"queueId": "1"}, False, -5, RC.INVALID_PARAMETER, "bornTimestamp -5"),
        ({"queueId": "1"}, False, v.MAX_TIMESTAMP_MS + 1, RC.INVALID_PARAMETER, "bornTimestamp"),
    ],
)
def test_send_header_numbers_are_written_as_java_writes_them(ext, short, born, code, part):
    bad = v.send_header(ext, short, 0, born)
    assert bad is not None and bad.code == code and part in bad.remark, bad


def test_a_negative_queue_id_still_lets_the_broker_pick():
    assert v.send_header({"queueId": "-1", "sysFlag": "0"}, False, 0, 1_700_000_000_000) is None
    assert v.send_header({"e": "-1", "queueId": "+1"}, True, 0, 0) is None  # V2 keys: "queueId" is not a field


def test_the_trace_topic_is_the_one_system_topic_producers_may_send_to():
    from broker.processors.validate import send_topic

    assert send_topic("RMQ_SYS_TRACE_TOPIC") is None  # RocketMQ's clients send trace records there
    for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_trace_topic", "SCHEDULE_TOPIC_XXXX", "TBW102"):
        refused = send_topic(topic)
        assert refused is not None and refused.code == 16, topic  # NO_PERMISSION
