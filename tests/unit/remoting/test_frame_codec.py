"""Frame and header codec against byte tables built from spec remoting.md §1, plus fuzzing of the decoders."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting.codes import LanguageCode
from remoting.frame_codec import (
    FLAG_RESPONSE,
    SERIALIZE_ROCKETMQ,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    decode,
    encode_bytes,
    response_to,
)


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """Spec §1.1 by hand: length, type<<24 | header length, header, body."""
    return struct.pack(">ii", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


def test_json_request_has_fastjson_key_order_and_string_fields():
    cmd = RemotingCommand(105, opaque=7, ext={"topic": "T1", "n": 4, "b": True}, language=LanguageCode.JAVA)
    raw = encode_bytes(cmd)
    header = (
        b'{"code":105,"extFields":{"topic":"T1","n":"4","b":"true"},"flag":0,"language":"JAVA","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    assert raw == frame(header)


def test_response_without_header_matches_the_spec_shape():
    req = RemotingCommand(105, opaque=7)
    raw = encode_bytes(response_to(req, 0))
    assert (
        raw[8:] == b'{"code":0,"flag":1,"language":"PYTHON","opaque":7,"serializeTypeCurrentRPC":"JSON","version":407}'
    )


def test_cpp_client_header_with_numbers_and_no_serialize_type_decodes():
    # spec §7.2b: numbers inside extFields, empty remark, no serializeTypeCurrentRPC
    header = (
        b'{"code":10,"extFields":{"AccessKey":"","defaultTopicQueueNums":4,"flag":0,"batch":"0","topic":"T"},'
        b'"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}'
    )
    cmd = decode(frame(header, b"body")[4:])
    assert (cmd.code, cmd.opaque, cmd.version, cmd.language) == (10, 0, 63, LanguageCode.CPP)
    assert cmd.ext == {"AccessKey": "", "defaultTopicQueueNums": "4", "flag": "0", "batch": "0", "topic": "T"}
    assert cmd.body == b"body" and cmd.remark == ""


def test_binary_header_golden_bytes():
    # spec §1.4: code i16, language u8, version i16, opaque i32, flag i32, remark, extFields entries
    expected = (
        struct.pack(">hBhii", 105, 0, 407, 9, 1)
        + struct.pack(">i", 2)
        + b"ok"
        + struct.pack(">i", 2 + 5 + 4 + 2)
        + struct.pack(">h", 5)
        + b"topic"
        + struct.pack(">i", 2)
        + b"T1"
    )
    cmd = RemotingCommand(
        105,
        opaque=9,
        flag=FLAG_RESPONSE,
        remark="ok",
        ext={"topic": "T1"},
        language=LanguageCode.JAVA,
        serialize_type=SERIALIZE_ROCKETMQ,
    )
    assert encode_bytes(cmd) == frame(expected, serialize_type=1)
    back = decode(frame(expected, b"xy", 1)[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.ext, back.body) == (
        105,
        9,
        1,
        "ok",
        {"topic": "T1"},
        b"xy",
    )


def test_response_replies_in_the_request_serialize_type():
    req = decode(encode_bytes(RemotingCommand(14, serialize_type=SERIALIZE_ROCKETMQ))[4:])
    assert decode(encode_bytes(response_to(req, 22, "none"))[4:]).serialize_type == SERIALIZE_ROCKETMQ


@pytest.mark.parametrize(
    "header,why",
    [
        (b"[1,2]", "not an object"),
        (b'{"code":"105"}', "not an integer"),
        (b'{"opaque":1}', "no code"),
        (b'{"code":1,"remark":5}', "not a string"),
        (b"\xff\xfe", "does not parse"),
    ],
)
def test_bad_json_headers_raise_frame_error_with_the_reason(header, why):
    with pytest.raises(FrameError, match=why):
        decode(frame(header)[4:])


@pytest.mark.parametrize(
    "header,why",
    [
        (b'{"code":1,"opaque":3,"extFields":{"a":{"b":1}}}', "strings or numbers"),
        (b'{"code":1,"extFields":[1]}', "object"),
    ],
)
def test_ext_fields_that_are_not_flat_scalars_decode_with_a_problem_to_answer(header, why):
    cmd = decode(frame(header)[4:])
    assert cmd.ext is None and why in cmd.problem


def test_header_length_past_the_frame_and_unknown_type_are_refused():
    with pytest.raises(FrameError, match="runs past"):
        decode(struct.pack(">i", 100) + b"{}")
    with pytest.raises(FrameError, match="unknown serialize type"):
        decode(struct.pack(">i", (7 << 24) | 2) + b"{}")


def test_frame_decoder_refuses_lengths_outside_the_cap():
    dec = FrameDecoder(max_frame=1024)
    with pytest.raises(FrameError, match="outside"):
        dec.feed(struct.pack(">i", 1025))
    with pytest.raises(FrameError, match="outside"):
        FrameDecoder().feed(struct.pack(">i", 2) + b"xx")


ext_values = st.dictionaries(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=12), max_size=6)
commands = st.builds(
    RemotingCommand,
    st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.sampled_from([0, 1, 2]),
    remark=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    ext=st.one_of(st.none(), ext_values.filter(bool)),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from([0, 1]),
)


@given(commands, st.lists(st.integers(1, 50), min_size=1, max_size=10))
@settings(max_examples=200, deadline=None)
def test_round_trip_through_any_chunking(cmd, cuts):
    raw = encode_bytes(cmd) * 2
    dec = FrameDecoder()
    frames, pos = [], 0
    for cut in cuts * 20:
        frames += dec.feed(raw[pos : pos + cut])
        pos += cut
        if pos >= len(raw):
            break
    frames += dec.feed(raw[pos:])
    assert len(frames) == 2 and dec.buffered == 0
    back = decode(frames[0])
    assert (back.code, back.opaque, back.flag, back.body) == (cmd.code, cmd.opaque, cmd.flag, cmd.body)
    assert back.remark == cmd.remark
    assert (back.ext or None) == (cmd.ext or None)


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_any_bytes_decode_or_raise_frame_error(data):
    try:
        for f in FrameDecoder(max_frame=4096).feed(data):
            decode(f)
    except FrameError:
        pass


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=10,
    )
)
@settings(max_examples=300, deadline=None)
def test_any_json_header_decodes_or_raises_frame_error(value):
    try:
        decode(frame(json.dumps(value).encode())[4:])
    except FrameError:
        pass


@given(st.binary(max_size=120))
@settings(max_examples=500, deadline=None)
def test_any_binary_header_decodes_or_raises_frame_error(header):
    try:
        decode(frame(header, serialize_type=1)[4:])
    except FrameError:
        pass
