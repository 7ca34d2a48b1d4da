"""Java's String.hashCode: the fast ASCII path agrees with a plain loop over UTF-16 code units."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from remoting.message_codec import java_string_hash


def reference(text: str) -> int:
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


@given(st.text(max_size=300) | st.text(alphabet=st.characters(max_codepoint=127), max_size=300))
def test_matches_javas_definition(text):
    assert java_string_hash(text) == reference(text)


def test_known_java_values():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("日本") == 835047
