"""connectors.spark.decode.RowsBuilder reads pull responses with the shared codec's rules: the same ids,
offsets, tags, keys and properties as remoting.message_codec.iter_records, and RecordError (never another
exception) on bytes that are not whole records. Needs no pyarrow: only flush() builds Arrow arrays."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.spark.decode import RowsBuilder
from remoting.message_codec import RecordError, host_bytes, iter_records
from tests.stored_records import stored_record

_text = st.text(alphabet="ab\x01\x02é", max_size=8)


@st.composite
def responses(draw) -> bytes:
    out = []
    for qoff in range(draw(st.integers(1, 4))):
        names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "X", "", "Y\x01"])
        props = "".join(f"{draw(names)}\x01{draw(_text)}\x02" for _ in range(draw(st.integers(0, 4))))
        props = props.replace("\x02\x02", "\x02")
        if props and "\x01" not in props:
            props = ""
        out.append(
            stored_record(
                queue_id=1, queue_offset=qoff, physical_offset=1000 * qoff, born_timestamp=1,
                born_host=host_bytes("10.0.0.1", 5), store_timestamp=2, store_host=host_bytes("10.0.0.2", 10911),
                body=draw(st.binary(max_size=50)), properties=props.encode(),
            )
        )
    return b"".join(out)


def _rows(buf: bytes) -> RowsBuilder:
    rows = RowsBuilder(None, "T", "broker-a", 1)  # type: ignore[arg-type]
    rows.add_records(buf, 0, 1 << 62)
    return rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses())
def test_rows_agree_with_the_codec(buf):
    messages = list(iter_records(buf))
    rows = _rows(buf)
    assert rows.offsets == [m.queue_offset for m in messages]
    assert rows.msg_ids == [m.msg_id for m in messages]
    assert rows.tags == [m.properties.get("TAGS") for m in messages]
    assert rows.keys == [m.properties.get("KEYS") for m in messages]
    other = [{k: v for k, v in m.properties.items() if k not in ("TAGS", "KEYS", "UNIQ_KEY")} for m in messages]
    ends = rows.map_offsets
    got = [dict(zip(rows.map_keys[a:b], rows.map_values[a:b], strict=True)) for a, b in itertools.pairwise(ends)]
    assert got == other
    assert bytes(rows.body_data) == b"".join(m.body for m in messages)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses(), st.data())
def test_damaged_responses_raise_record_error_and_nothing_else(buf, data):
    raw = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for candidate in (bytes(raw), bytes(raw[:cut])):
        try:
            _rows(candidate)
        except RecordError:
            pass
