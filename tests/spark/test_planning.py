"""Pure parts of the connector (no Spark, no broker): offsets, admission control, ranges, options, decoding."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.spark import offsets as off
from connectors.spark.errors import OptionError
from connectors.spark.options import sink_options, source_options
from connectors.spark.read import choose_node
from remoting.message_codec import encode_properties, host_bytes
from tests.stored_records import stored_record

NS = {"namesrv": "127.0.0.1:9876"}


def test_offsets_are_canonical_whatever_order_they_were_built_in():
    a = off.canonical({"T": {"b:10": 1, "b:2": 2, "a:1": 3}, "S": {"a:0": 0}})
    assert json.dumps(a) == '{"S": {"a:0": 0}, "T": {"a:1": 3, "b:2": 2, "b:10": 1}}'


def test_earliest_latest_and_json_resolve_against_live_queues_with_missing_queues_at_earliest():
    live = {"T": {"b:0": (5, 50), "b:1": (0, 10)}}
    assert off.resolve("earliest", live) == {"T": {"b:0": 5, "b:1": 0}}
    assert off.resolve("latest", live) == {"T": {"b:0": 50, "b:1": 10}}
    spec = off.parse_spec('{"T": {"b:0": -1}}', "startingOffsets", ("T",))
    assert off.resolve(spec, live) == {"T": {"b:0": 50, "b:1": 0}}


def test_a_json_spec_naming_a_topic_that_is_not_read_is_refused_with_a_hint():
    with pytest.raises(OptionError, match="not in option topic"):
        off.parse_spec('{"X": {"b:0": 1}}', "startingOffsets", ("T",))


@given(
    lags=st.lists(st.integers(0, 5_000), min_size=1, max_size=6),
    starts=st.lists(st.integers(0, 1_000), min_size=6, max_size=6),
    limit=st.integers(1, 10_000),
)
def test_admission_control_never_exceeds_the_limit_and_always_makes_progress(lags, starts, limit):
    start = {"T": {f"b:{i}": starts[i] for i in range(len(lags))}}
    target = {"T": {f"b:{i}": starts[i] + lag for i, lag in enumerate(lags)}}
    end = off.cap_by_rows(start, target, limit)
    taken = [end["T"][k] - start["T"][k] for k in start["T"]]
    assert all(0 <= t <= lag for t, lag in zip(taken, lags, strict=True))
    assert sum(taken) == min(limit, sum(lags))


def test_ranges_split_long_queues_and_skip_queues_that_are_new_in_the_end_offsets():
    ranges = off.plan_ranges({"T": {"b:0": 0}}, {"T": {"b:0": 25, "b:1": 7}}, 10)
    assert [(r.queue_id, r.start, r.until) for r in ranges] == [(0, 0, 10), (0, 10, 20), (0, 20, 25)]


def test_unknown_or_malformed_options_name_the_problem_and_the_fix():
    with pytest.raises(OptionError, match="did you mean 'maxMessagesPerTrigger'"):
        source_options({**NS, "topic": "T", "maxMessagePerTrigger": "5"})
    with pytest.raises(OptionError, match="readFromSlave"):
        source_options({**NS, "topic": "T", "readFromSlave": "always"})
    with pytest.raises(OptionError, match="topic.*is required"):
        source_options(NS)
    with pytest.raises(OptionError, match="several topics"):
        sink_options({**NS, "topic": "A,B"})


def test_read_node_choice_follows_the_mode_and_falls_back_to_a_healthy_sibling():
    assert choose_node("auto", [0, 1], advised=1, healthy={0, 1}) == 1
    assert choose_node("auto", [0, 1], advised=1, healthy={0}) == 0
    assert choose_node("never", [0, 1], advised=1, healthy={0, 1}) == 0
    assert choose_node("never", [0, 1], advised=0, healthy={1}) == 1
    assert choose_node("prefer", [0, 2, 1], advised=0, healthy={0, 1, 2}) == 1
    assert choose_node("prefer", [0], advised=0, healthy={0}) == 0


def test_records_decode_into_the_arrow_schema_spark_expects_and_only_inside_the_range():
    from connectors.spark.decode import RowsBuilder
    from connectors.spark.schema import arrow_schema

    buf = b"".join(
        stored_record(
            queue_id=3,
            queue_offset=i,
            physical_offset=100 * i,
            born_timestamp=1_000 + i,
            born_host=host_bytes("127.0.0.1", 1),
            store_timestamp=2_000 + i,
            body=f"b{i}".encode(),
            properties=encode_properties(
                {"TAGS": "t", "KEYS": "k1 k2", "UNIQ_KEY": f"U{i}", "p": "v"} if i % 2 else {}
            ),
        )
        for i in range(5)
    )
    builder = RowsBuilder(arrow_schema(), "T", "b", 3)
    assert builder.add_records(buf, 1, 4) == 5
    batch = builder.flush()
    assert batch.schema == arrow_schema()
    rows = batch.to_pylist()
    assert [r["queueOffset"] for r in rows] == [1, 2, 3]
    assert rows[0]["msgId"] == "U1" and rows[0]["keys"] == "k1 k2" and rows[0]["properties"] == [("p", "v")]
    assert rows[1]["tags"] is None and rows[1]["msgId"].endswith(f"{200:016X}")
    assert rows[0]["storeTimestamp"].timestamp() == pytest.approx(2.001)


def test_deleted_start_offsets_fail_with_a_hint_or_skip_ahead_when_data_loss_is_allowed():
    from connectors.spark.errors import DataLossError
    from connectors.spark.source import check_data_loss

    live = {"T": {"b:0": (100, 500), "b:1": (0, 10)}}
    start = {"T": {"b:0": 40, "b:1": 3}}
    with pytest.raises(DataLossError, match=r"offsets \[40, 100\) were deleted.*failOnDataLoss=false"):
        check_data_loss(start, live, fail=True)
    assert check_data_loss(start, live, fail=False) == {"T": {"b:0": 100, "b:1": 3}}
