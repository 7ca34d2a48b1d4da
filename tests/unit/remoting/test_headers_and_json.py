"""Typed header fields (strict numbers) and fastjson's dialect of JSON bodies (spec §5.1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting import fastjson
from remoting.codes import ResponseCode
from remoting.headers import Fields, HeaderError
from remoting.message_headers import V1_KEYS, PullHeader, SendHeader


@pytest.mark.parametrize("text", ["١٢", "1.5", " 1", "1e3", "", "0x10", "9" * 21, "2147483648"])
def test_ints_that_java_or_python_would_bend_are_refused(text):
    f = Fields({"queueId": text}, "pull request")
    with pytest.raises(HeaderError, match="queueId") as err:
        f.req_int("queueId")
    assert err.value.code == ResponseCode.INVALID_PARAMETER  # the request's fault: retrying it never helps


def test_numbers_and_booleans_parse_as_java_sends_them():
    f = Fields({"a": "-5", "b": "+7", "c": "9223372036854775807", "t": "TRUE", "z": "0"})
    assert (f.req_int("a"), f.req_int("b"), f.req_long("c")) == (-5, 7, 2**63 - 1)
    assert f.bool("t") is True and f.bool("z") is False and f.bool("missing", True) is True
    with pytest.raises(HeaderError, match="true/false"):
        Fields({"x": "yes"}).bool("x")


def test_missing_required_field_names_it():
    with pytest.raises(HeaderError, match="topic is missing"):
        SendHeader.parse(10, {"producerGroup": "g", "queueId": "0"})


def test_send_header_v1_and_v2_parse_alike():
    v1 = {
        "producerGroup": "g",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "2",
        "sysFlag": "0",
        "bornTimestamp": "5",
        "flag": "0",
        "properties": "TAGS\x01a",
        "batch": "false",
    }
    h1 = SendHeader.parse(10, v1)
    h2 = SendHeader.parse(310, h1.to_v2())
    assert h1 == h2 and h2.topic == "T" and h2.queue_id == 2 and not h2.dedup
    h1.dedup = True
    assert SendHeader.parse(320, h1.to_v2()).dedup and SendHeader.parse(320, h1.to_v2()).batch


def test_send_header_carries_the_senders_timeout_only_when_set():
    base = SendHeader(producer_group="g", topic="T", queue_id=0, born_timestamp=5)
    assert "timeoutMillis" not in base.to_v2() and SendHeader.parse(310, base.to_v2()).timeout_millis is None
    base.timeout_millis = 4500
    assert base.to_v2()["timeoutMillis"] == "4500" and SendHeader.parse(310, base.to_v2()) == base


def test_pull_header_round_trip():
    h = PullHeader(
        consumer_group="g",
        topic="T",
        queue_id=1,
        queue_offset=10,
        max_msg_nums=32,
        sys_flag=0x6,
        suspend_timeout_millis=15000,
        subscription="a || b",
        sub_version=1,
        expression_type="TAG",
        max_msg_bytes=65536,
    )
    assert PullHeader.parse(h.to_ext()) == h


def test_fastjson_bare_number_keys_and_inline_object_keys():
    body = b'{"offsetTable":{"T@G":{0:15,1:2}},"t":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":5}}}'
    value = fastjson.loads(body)
    assert value["offsetTable"] == {"T@G": {0: 15, 1: 2}}
    (key,) = value["t"]
    assert key.dict() == {"brokerName": "b", "queueId": 0, "topic": "T"}
    assert fastjson.dumps(value) == (
        b'{"offsetTable":{"T@G":{"0":15,"1":2}},"t":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":5}}}'
    )


def test_fastjson_strings_that_look_like_keys_are_left_alone():
    assert fastjson.loads('{"a":"{0:1}", 5:"x,1:y"}') == {"a": "{0:1}", 5: "x,1:y"}


@given(st.text(max_size=60))
@settings(max_examples=500, deadline=None)
def test_fastjson_parses_or_raises_its_error(text):
    try:
        fastjson.loads(text)
    except fastjson.JsonBodyError:
        pass


# found by bench/fuzz.py (harness.fuzz_targets' json target) --------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"[" + b"9" * 5000 + b"]",  # more digits than Python's int() takes (4300): ValueError escaped
        b'{"offsetTable":{1:' + b"7" * 4400 + b"}}",
        b'{{"a":{"b":1}}:2}',  # an inline object key holding an object: TypeError (unhashable dict) escaped
        b'{{"a":[1]}:2}',  # ... holding an array
        b'{{1:"x","a":2}:3}',  # ... with a number and a string as names: TypeError from sorting them escaped
        b'{{{"q":0}:1}:2}',  # ... with an object as a name
    ],
)
def test_fastjson_refuses_what_it_cannot_represent_with_its_own_error(body):
    with pytest.raises(fastjson.JsonBodyError):
        fastjson.loads(body)


def test_fastjson_still_reads_bean_keys_and_long_numbers_within_the_limit():
    value = fastjson.loads(b'{{"brokerName":"b","queueId":0,"topic":"T"}:{"n":' + b"9" * 4000 + b"}}")
    (key,) = value
    assert key.dict() == {"brokerName": "b", "queueId": 0, "topic": "T"}
    assert value[key]["n"] == int("9" * 4000)


_SEND_VALUES = st.one_of(
    st.none(), st.sampled_from(["", "0", "1", "7", "-1", "+3", "true", "false", "TRUE", "0x10", "١", " 5",
                                "2147483647", "2147483648", "999999999", "1700000000000", "9223372036854775807",
                                "99999999999999999999", "T", "TBW102", "pg"]),
    st.text(max_size=6),
)
_SEND_NAMES = ["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
               "bornTimestamp", "flag", "properties", "reconsumeTimes", "maxReconsumeTimes", "batch", "bname",
               "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "dedup", "timeoutMillis"]


@settings(max_examples=400, deadline=None)
@given(code=st.sampled_from([10, 310, 320]),
       ext=st.dictionaries(st.sampled_from(_SEND_NAMES), _SEND_VALUES, max_size=14).map(
           lambda d: {k: v for k, v in d.items() if v is not None}))
def test_send_header_shortcut_reads_what_the_general_reader_reads(code, ext):
    """``SendHeader.parse`` takes a shortcut for plain headers (issue 26): same header or same error as the
    general reader, for V1 and V2 names, mixed, odd numbers and booleans."""
    try:
        expected = SendHeader.parse_fields(code, ext)
    except HeaderError as exc:
        with pytest.raises(HeaderError) as got:
            SendHeader.parse(code, ext)
        assert str(got.value) == str(exc)
        return
    assert SendHeader.parse(code, ext) == expected
    header, plain = SendHeader.parse_plain(code, ext)
    if plain:  # the broker skips its sign scan for these: no number of theirs may carry one
        assert not any(v.startswith(("+", "-")) for k, v in ext.items() if k not in ("a", "b", "c", "i",
                       "producerGroup", "topic", "defaultTopic", "properties", "bname", "n"))


@pytest.mark.parametrize("code", [10, 310])
def test_send_header_shortcut_on_the_common_headers(code):
    v1 = {"producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
          "queueId": "3", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
          "properties": "UNIQ_KEY\x01A\x02WAIT\x01true", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    ext = v1 if code == 10 else {V1_KEYS.get(k, k): v for k, v in v1.items()}
    assert SendHeader.parse(code, ext) == SendHeader.parse_fields(code, ext)
    assert SendHeader.parse(code, ext).born_timestamp == 1700000000000
