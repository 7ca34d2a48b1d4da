"""The one record decoder (remoting.message_codec.decode_records, the SDK's pull path and the broker's ``decode``)
gives the same answer for a whole response as record by record (``iter_records``, through ``decode`` at each
offset) on every input: the same messages for valid concatenated records, and the same RecordError (offset and
reason) wherever one is raised."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoting.message_codec import RecordError, StoredMessage, decode_records, encode_record, host_bytes, iter_records
from tests.stored_records import stored_record

_topic = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=40)
_prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
_props = st.dictionaries(_prop_text.filter(bool), _prop_text, max_size=4)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_ip = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))


@st.composite
def records(draw) -> bytes:
    """1-5 records as the store writes them (properties in RocketMQ's k\\x01v\\x02 text)."""
    out = []
    for _ in range(draw(st.integers(1, 5))):
        props = draw(_props)
        out.append(
            encode_record(
                topic_bytes=draw(_topic).encode(),
                queue_id=draw(_i32),
                flag=draw(_i32),
                queue_offset=draw(_i64),
                physical_offset=draw(_i64),
                sys_flag=draw(_i32),
                born_timestamp=draw(_i64),
                born_host=host_bytes(draw(_ip), draw(st.integers(0, 65535))),
                store_timestamp=draw(_i64),
                store_host=host_bytes(draw(_ip), draw(st.integers(0, 65535))),
                reconsume_times=draw(_i32),
                body=draw(st.binary(max_size=300)),
                properties="".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode(),
                prepared_transaction_offset=draw(_i64),
            )
        )
    return b"".join(out)


def _record_by_record(buf, check_crc: bool = False):
    try:
        return list(iter_records(buf, check_crc=check_crc))
    except RecordError as exc:
        return ("RecordError", exc.offset, exc.reason)


def _whole_response(buf, check_crc: bool = False):
    try:
        return decode_records(buf, check_crc=check_crc)
    except RecordError as exc:
        return ("RecordError", exc.offset, exc.reason)


@given(records(), st.booleans())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_valid_records_decode_to_the_same_messages(buf, check_crc):
    expected = list(iter_records(buf, check_crc=check_crc))
    assert decode_records(buf, check_crc=check_crc) == expected
    assert decode_records(memoryview(buf)) == expected  # any buffer type


@given(records(), st.data(), st.booleans())
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_or_torn_bytes_give_the_same_answer_or_the_same_error(buf, data, check_crc):
    raw = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(raw)))
    for candidate in (bytes(raw), bytes(raw[:cut])):
        assert _whole_response(candidate, check_crc) == _record_by_record(candidate, check_crc)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_give_the_same_answer_or_the_same_error(raw):
    assert _whole_response(raw) == _record_by_record(raw)


def test_empty_response_has_no_message():
    assert decode_records(b"") == []


def test_a_torn_tail_is_an_error_not_a_short_list():
    buf = stored_record(body=b"hello", properties=b"UNIQ_KEY\x01abc\x02")
    assert decode_records(buf)[0].properties == {"UNIQ_KEY": "abc"}
    with pytest.raises(RecordError):
        decode_records(buf + buf[:50])


def test_stored_message_field_order_is_what_the_positional_constructor_assumes():
    # decode_records builds StoredMessage positionally for speed; a reordered dataclass must fail here.
    assert [f.name for f in dataclasses.fields(StoredMessage)] == [
        "topic",
        "queue_id",
        "queue_offset",
        "physical_offset",
        "store_size",
        "body",
        "properties",
        "flag",
        "sys_flag",
        "born_timestamp",
        "born_host",
        "store_timestamp",
        "store_host",
        "reconsume_times",
        "body_crc",
        "prepared_transaction_offset",
    ]
