"""The index's batch key extraction and hashing against the per-key reference (``keys_of`` semantics and
``java_string_hash``): any topic, any UTF-8 values (ASCII or not, long or short), any number per batch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.index_file import key_hash
from broker.store.index_keys import hashes, values_of
from remoting.message_codec import encode_properties, property_value

_value_chars = st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",))
_values = st.one_of(st.text(alphabet="0123456789ABCDEF-_.:order", min_size=1, max_size=40),
                    st.text(alphabet=_value_chars, min_size=1, max_size=60),
                    st.text(alphabet="x", min_size=4001, max_size=4100))
_topics = st.sampled_from(["Orders", "T", "%RETRY%g", "RMQ_SYS_TRANS_HALF_TOPIC", "topic-ä"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_topics, _values), max_size=40))
def test_a_batch_hashes_every_key_as_java_does(pairs):
    topics = [t for t, _ in pairs]
    values = [v.encode() for _, v in pairs]
    assert hashes(topics, values) == [key_hash(f"{t}#{v}") for t, v in pairs]


def _keys_reference(props: bytes) -> list[bytes]:
    out = []
    uniq = property_value(props, "UNIQ_KEY")
    if uniq:
        out.append(uniq.encode())
    keys = property_value(props, "KEYS")
    if keys:
        out.extend(k.encode() for k in keys.split(" ") if k)
    return out


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "a", "KEYSX", "XUNIQ_KEY"]),
                       st.text(alphabet=st.sampled_from("ab c1é "), max_size=12), max_size=5))
def test_the_values_are_the_uniq_key_then_each_key(props):
    raw = encode_properties(props)
    assert values_of(raw) == _keys_reference(raw)


def test_an_empty_batch_and_records_without_keys():
    assert hashes([], []) == []
    assert values_of(b"") == []
    assert values_of(encode_properties({"TAGS": "t", "KEYS": "  "})) == []
