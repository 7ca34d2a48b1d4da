"""SEND_BATCH_MESSAGE bodies (spec remoting.md §3.5): golden bytes written by hand from the table, round trips,
and damaged bodies that must raise BatchError and nothing else."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoting.message_codec import (
    BATCH_ENTRY_OVERHEAD,
    MAX_PROPERTIES_LEN,
    BatchError,
    MessageCodecError,
    decode_batch,
    decode_properties,
    encode_batch,
)
from tests.stored_records import stored_record

# Two messages, one field per line. TOTALSIZE counts the five i32 fields (20), PROPLEN's 2 bytes, body and
# properties: what Java's MessageDecoder.encodeMessage, Go and C++ write (the spec's "20 + ..." omits PROPLEN).
GOLDEN_HEX = (
    "0000002B"  # 0   TOTALSIZE = 22 + 3 + 18
    "00000000"  # 4   MAGICCODE
    "00000000"  # 8   BODYCRC
    "00000007"  # 12  FLAG
    "00000003"  # 16  BODYLEN
    "616263"  # 20  body "abc"
    "0012"  # 23  PROPLEN = 18
    "554E49515F4B4559014131"  # 25  "UNIQ_KEY\x01A1"
    "02544147530174"  # 36  "\x02TAGS\x01t" (no trailing \x02, as Java 4.9.7)
    "00000016"  # 43  TOTALSIZE = 22 (empty body, no properties)
    "00000000"  # 47  MAGICCODE
    "00000000"  # 51  BODYCRC
    "FFFFFFFF"  # 55  FLAG = -1
    "00000000"  # 59  BODYLEN
    "0000"  # 63  PROPLEN
)
GOLDEN_MESSAGES = [(7, b"abc", {"UNIQ_KEY": "A1", "TAGS": "t"}), (-1, b"", {})]


def test_golden_batch_matches_the_spec_layout_byte_for_byte():
    data = encode_batch(GOLDEN_MESSAGES)
    assert data.hex().upper() == GOLDEN_HEX
    assert len(data) == 43 + 22


def test_golden_batch_decodes_to_its_entries():
    data = bytes.fromhex(GOLDEN_HEX)
    assert decode_batch(data, 2, 3) == [(7, b"abc", b"UNIQ_KEY\x01A1\x02TAGS\x01t"), (-1, b"", b"")]
    assert decode_batch(data, 2, 3, properties_as_dict=True) == GOLDEN_MESSAGES
    assert decode_batch(bytearray(data), 2, 3) == decode_batch(memoryview(data), 2, 3) == decode_batch(data, 2, 3)


def test_pre_encoded_properties_pass_through_and_a_trailing_separator_is_read():
    data = encode_batch([(0, b"x", b"TAGS\x01t\x02")])
    assert decode_batch(data, 1, 1) == [(0, b"x", b"TAGS\x01t\x02")]
    assert decode_batch(data, 1, 1, properties_as_dict=True) == [(0, b"x", {"TAGS": "t"})]


def test_a_body_crc_of_zero_or_the_real_crc_is_accepted():
    data = bytearray(encode_batch([(0, b"abc", {})]))
    struct.pack_into(">i", data, 8, zlib.crc32(b"abc") & 0x7FFFFFFF)
    assert decode_batch(bytes(data), 1, 3) == [(0, b"abc", b"")]
    struct.pack_into(">i", data, 8, 12345)
    with pytest.raises(BatchError, match="BODYCRC 12345"):
        decode_batch(bytes(data), 1, 3)


def _entry(total=None, magic=0, crc=0, flag=0, body=b"ab", body_len=None, props=b"", props_len=None) -> bytes:
    body_len = len(body) if body_len is None else body_len
    props_len = len(props) if props_len is None else props_len
    total = BATCH_ENTRY_OVERHEAD + len(body) + len(props) if total is None else total
    return struct.pack(">iiiii", total, magic, crc, flag, body_len) + body + struct.pack(">h", props_len) + props


GOOD = _entry()


@pytest.mark.parametrize(
    ("data", "index", "offset", "text"),
    [
        (b"", 0, 0, "the body is empty"),
        (GOOD + GOOD[:21], 1, 24, "21 trailing bytes"),
        (GOOD + GOOD[:-1], 1, 24, "runs past the end"),
        (_entry(total=20 + 2), 0, 0, "TOTALSIZE 22 is not 22 + BODYLEN 2 + PROPLEN 0"),  # the spec's 20 + ... form
        (_entry(total=99), 0, 0, "TOTALSIZE 99"),
        (_entry(magic=-626843481), 0, 0, "MAGICCODE is 0xdaa320a7"),  # a stored record is not a batch entry
        (_entry(body_len=-1), 0, 0, "BODYLEN -1 outside"),
        (_entry(body=b"x" * 9), 0, 0, "BODYLEN 9 outside [0, 8]"),
        (_entry(body_len=1000), 0, 0, "BODYLEN 1000 outside"),
        (_entry(props=b"A\x01b", props_len=-3), 0, 0, "PROPLEN -3 is negative"),
        (_entry(props=b"A\x01b", props_len=2), 0, 0, "TOTALSIZE 27 is not 22 + BODYLEN 2 + PROPLEN 2"),
        (GOOD * 5, 4, 96, "more than 4 messages"),
    ],
)
def test_damaged_batches_say_which_message_where_and_why(data, index, offset, text):
    with pytest.raises(BatchError) as err:
        decode_batch(data, 4, 8)
    assert (err.value.index, err.value.offset) == (index, offset)
    assert text in err.value.reason and f"message {index} at byte {offset}" in str(err.value)


def test_a_stored_record_is_refused_as_a_batch():
    record = stored_record(body=b"abc")
    with pytest.raises(BatchError, match="MAGICCODE"):
        decode_batch(record, 32, 4096)


def test_encode_batch_refuses_what_it_cannot_write():
    with pytest.raises(BatchError, match="at least one message"):
        encode_batch([])
    with pytest.raises(BatchError, match="message 1 .*separators"):
        encode_batch([(0, b"a", {}), (0, b"b", {"K": "v\x02"})])
    with pytest.raises(BatchError, match=f"limit is {MAX_PROPERTIES_LEN}"):
        encode_batch([(0, b"a", {"K": "v" * MAX_PROPERTIES_LEN})])
    with pytest.raises(BatchError, match="does not fit in an i32"):
        encode_batch([(2**31, b"a", {})])
    assert issubclass(BatchError, MessageCodecError)


_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
_message = st.tuples(
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=300),
    st.dictionaries(_text, _text, max_size=4),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, min_size=1, max_size=20))
def test_batches_round_trip(messages):
    data = encode_batch(messages)
    max_body = max(len(b) for _, b, _ in messages)
    entries = decode_batch(data, len(messages), max_body)
    assert [(f, b) for f, b, _ in entries] == [(f, b) for f, b, _ in messages]
    java_view = [{k: v for k, v in p.items() if k and v} for _, _, p in messages]
    assert [decode_properties(p) for _, _, p in entries] == java_view
    assert [p for _, _, p in decode_batch(data, len(messages), max_body, properties_as_dict=True)] == java_view
    assert encode_batch(entries) == data  # raw properties pass through unchanged
    if len(messages) > 1:
        with pytest.raises(BatchError, match="more than"):
            decode_batch(data, len(messages) - 1, max_body)
    if max_body:
        with pytest.raises(BatchError, match="BODYLEN"):
            decode_batch(data, len(messages), max_body - 1)


def _decode_or_batch_error(data: bytes) -> None:
    try:
        entries = decode_batch(data, 64, 4096)
    except BatchError:
        return
    assert entries and all(isinstance(e, tuple) and len(e) == 3 for e in entries)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_batch_error_and_nothing_else(data):
    _decode_or_batch_error(data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, min_size=1, max_size=5), st.data())
def test_mutated_truncated_or_extended_batches_raise_batch_error_and_nothing_else(messages, data):
    raw = bytearray(encode_batch(messages))
    for _ in range(data.draw(st.integers(0, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    tail = data.draw(st.binary(max_size=30))
    for candidate in (bytes(raw), bytes(raw[:cut]), bytes(raw) + tail):
        _decode_or_batch_error(candidate)
