"""The broker's SQL92 subscriptions: a stored record's properties read in place give what the full properties parse
gives (duplicates, empty values, any UTF-8), and the table of compiled filters stays bounded."""

from __future__ import annotations

import mmap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.filter.consumer_filters import ConsumerFilters, PropertyFilter, record_properties
from broker.filter.sql92 import SqlFilterError, compile_filter
from remoting.message_codec import decode_properties


def record(props: bytes, body: bytes = b"body" * 10, topic: bytes = b"T") -> bytes:
    """The fields the filter reads, laid out as a stored record (the rest zeros)."""
    return (bytes(84) + len(body).to_bytes(4, "big") + body + bytes([len(topic)]) + topic
            + len(props).to_bytes(2, "big") + props)


def in_mapping(raw: bytes, at: int = 7) -> mmap.mmap:
    mm = mmap.mmap(-1, at + len(raw) + 5)
    mm[at : at + len(raw)] = raw
    return mm


names = st.sampled_from(["a", "b", "TAGS", "ab"])
values = st.one_of(st.just(""), st.sampled_from(["1", "5", "x", "hit", "10.5"]),
                   st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
                           max_size=4))
pairs = st.lists(st.tuples(names, values), max_size=6)
EXPRESSIONS = ["a > 2", "a = 'x' OR b IS NULL", "TAGS IN ('hit') AND a BETWEEN 1 AND 9", "ab IS NOT NULL",
               "NOT (b = 'hit')", "a <> 'x'"]


@given(pairs, st.booleans())
def test_match_record_agrees_with_the_full_properties_parse(items, trailing):
    text = "\x02".join(f"{k}\x01{v}" for k, v in items) + ("\x02" if trailing and items else "")
    raw = text.encode()
    mm = in_mapping(record(raw))
    start, end = 7, 7 + len(record(raw))
    assert record_properties(mm, start, end) == decode_properties(raw)
    for expression in EXPRESSIONS:
        sql = compile_filter(expression)
        assert PropertyFilter(sql).match_record(mm, start, end) == sql.matches(decode_properties(raw)), expression


def test_a_record_whose_lengths_do_not_fit_matches_nothing():
    good = record(b"a\x015\x02")
    f = PropertyFilter(compile_filter("a = 5"))
    assert f.match_record(good, 0, len(good))
    assert not f.match_record(good, 0, len(good) - 1)  # properties run past the end
    assert not f.match_record(good, 0, 80)
    huge_body = bytearray(good)
    huge_body[84:88] = (10**6).to_bytes(4, "big")
    assert not f.match_record(bytes(huge_body), 0, len(good))


def test_filters_are_compiled_once_kept_per_group_and_topic_and_bounded():
    filters = ConsumerFilters(capacity=3)
    first = filters.get("g", "T", "a > 1")
    assert filters.get("g", "T", "a > 1") is first
    assert filters.get("g", "T", "a > 2") is not first  # the group changed its expression
    for i in range(10):
        filters.get(f"g{i}", "T", "a > 1")
    assert len(filters) == 3
    for _ in range(2):  # a refused expression is remembered and refused again, with its position
        with pytest.raises(SqlFilterError) as refused:
            filters.get("g", "T", "a >")
        assert refused.value.position == 3
        assert len(list(_frames(refused.value))) < 5  # not one more frame per refusal


def _frames(exc):
    tb = exc.__traceback__
    while tb is not None:
        yield tb
        tb = tb.tb_next
