"""The message index's keys and their hashes, a batch of records at a time. Pure.

A record is indexed under ``topic#UNIQ_KEY`` and ``topic#k`` for each space-separated ``k`` of its ``KEYS``
(RocketMQ IndexService.buildKey), hashed with Java's ``String.hashCode`` over UTF-16 code units, kept as
``abs(hash)`` (0 where that overflows, RocketMQ's indexKeyHashMethod).

Why not one ``java_string_hash`` call per key: that costs a Python step per character, and a message has two or
three keys of 20 to 40 characters. Here the work per batch is a few C calls over all of its keys:

- ``topic#value`` hashes as ``hash(topic#) * 31**len(value) + hash(value)`` (mod 2**32), so the topic's part is
  computed once per topic and only the values are hashed;
- an ASCII value's hash is the number its characters spell in base 31 (mod 2**32). A character ``c`` (< 961) is
  ``31 * (c // 31) + c % 31``, so the value is ``31 * int(Q, 31) + int(R, 31)`` where ``Q`` and ``R`` are the
  value's bytes mapped to the base-31 digits of ``c // 31`` and ``c % 31``: two ``bytes.translate`` over the whole
  batch joined, one ``split``, and two ``int(.., 31)`` per value, all in C;
- a value that is not ASCII (or is very long) takes the exact per-character path.

``tests/unit/store/test_index_keys.py`` checks the batch against ``java_string_hash`` over generated keys.
"""

from __future__ import annotations

from itertools import repeat
from types import ModuleType

from remoting.message_codec import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, java_string_hash

native: ModuleType | None  # the C path (``index_native.c``, built by ``make``); None: pure Python
try:
    from broker.store import index_native as native
except ImportError:
    native = None

_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_SEP = 2  # \x02 ends a property value, so no value contains it: it joins the values of a batch
_R = bytes(_SEP if c == _SEP else _DIGITS[c % 31] for c in range(256))
_Q = bytes(_SEP if c == _SEP else _DIGITS[c // 31 % 31] for c in range(256))
_MASK = 0xFFFFFFFF
_MAX_FAST = 4000  # int() of longer digit strings is refused (sys.int_info.str_digits_check_threshold)
_POW_MAX = 4096
_POW31 = [pow(31, k, 1 << 32) for k in range(_POW_MAX + 1)]  # 31**k mod 2**32
_UNIQ = b"\x02" + PROPERTY_UNIQ_KEY.encode() + b"\x01"
_KEYS = b"\x02" + PROPERTY_KEYS.encode() + b"\x01"
_UNIQ_AT_0, _KEYS_AT_0 = _UNIQ[1:], _KEYS[1:]
_UNIQ_LEN, _KEYS_LEN, _UNIQ_AT_0_LEN, _KEYS_AT_0_LEN = len(_UNIQ), len(_KEYS), len(_UNIQ) - 1, len(_KEYS) - 1
_CACHE_MAX = 4096

_prefix: dict[str, int] = {}  # topic -> hash of "topic#" mod 2**32


def key_hash_of(unsigned: int) -> int:
    """``abs`` of the signed 32-bit hash, 0 for Integer.MIN_VALUE (RocketMQ's indexKeyHashMethod)."""
    return unsigned if unsigned < 0x80000000 else -unsigned & 0x7FFFFFFF


def _topic_prefix(topic: str) -> int:
    got = _prefix.get(topic)
    if got is None:
        got = java_string_hash(topic + "#") & _MASK
        if len(_prefix) >= _CACHE_MAX:
            _prefix.clear()
        _prefix[topic] = got
    return got


def values_of(props: bytes) -> list[bytes]:
    """The raw values a record is indexed under: its UNIQ_KEY, then each non-empty key of its KEYS (the first
    occurrence of each property, as ``property_value`` reads them)."""
    out = []
    if props.startswith(_UNIQ_AT_0):
        start = _UNIQ_AT_0_LEN
    else:
        start = props.find(_UNIQ)
        if start >= 0:
            start += _UNIQ_LEN
    if start >= 0:
        end = props.find(b"\x02", start)
        value = props[start:end] if end >= 0 else props[start:]
        if value:
            out.append(value)
    if props.startswith(_KEYS_AT_0):
        start = _KEYS_AT_0_LEN
    else:
        start = props.find(_KEYS)
        if start < 0:
            return out
        start += _KEYS_LEN
    end = props.find(b"\x02", start)
    value = props[start:end] if end >= 0 else props[start:]
    if b" " in value:
        out += filter(None, value.split(b" "))
    elif value:
        out.append(value)
    return out


def record_keys(topics: list[str], props: list[bytes], phys: list[int], stamps: list[int],
                use_native: bool = True) -> tuple[list[int], list[int], list[int]]:
    """(hash, record offset, record store time) of every index key of the records ``topics[i]``/``props[i]``
    (stored properties) at ``phys[i]``/``stamps[i]``, in record order: ``values_of`` and ``hashes`` in one C call
    where the native module is built (``use_native=False`` forces the Python path: tests compare the two)."""
    n = len(props)
    if native is not None and use_native:
        first = topics[0] if n else ""
        if topics.count(first) == n:
            prefixes = [_topic_prefix(first)] * n
        else:
            prefixes = list(map(_topic_prefix, topics))
        hashed, offsets, times, fixups = native.keys(prefixes, props, phys, stamps)
        for pos, rec, start, end in fixups:  # values that are not ASCII: Java hashes their UTF-16 code units
            text = f"{topics[rec]}#{props[rec][start:end].decode('utf-8', 'replace')}"
            hashed[pos] = key_hash_of(java_string_hash(text) & _MASK)
        return hashed, offsets, times
    key_topics: list[str] = []
    values: list[bytes] = []
    offsets, times = [], []
    for topic, raw, phy, ts in zip(topics, props, phys, stamps, strict=True):
        found = values_of(raw)
        if found:
            k = len(found)
            key_topics += [topic] * k
            values += found
            offsets += [phy] * k
            times += [ts] * k
    return hashes(key_topics, values), offsets, times


def hashes(topics: list[str], values: list[bytes]) -> list[int]:
    """The index hash (``key_hash_of``) of ``topics[i] + "#" + values[i]`` (a value is UTF-8, decoded with
    replacement as the record's properties are) for every ``i``."""
    n = len(values)
    if not n:
        return []
    joined = b"\x02".join(values)
    if joined.isascii() and max(map(len, values)) <= _MAX_FAST:
        qs = map(int, joined.translate(_Q).split(b"\x02"), repeat(31, n))
        rs = map(int, joined.translate(_R).split(b"\x02"), repeat(31, n))
        weights = map(_POW31.__getitem__, map(len, values))
        first = topics[0]
        if topics.count(first) == n:  # one topic (the usual batch): its prefix is one number
            p = _topic_prefix(first)
            us = [(p * w + 31 * q + r) & _MASK for w, q, r in zip(weights, qs, rs)]
        else:
            us = [(_topic_prefix(t) * w + 31 * q + r) & _MASK for t, w, q, r in zip(topics, weights, qs, rs)]
        return [abs(u - ((u & 0x80000000) << 1)) & 0x7FFFFFFF for u in us]  # key_hash_of, inline
    out = []
    for topic, value in zip(topics, values, strict=True):
        if value.isascii() and len(value) <= _MAX_FAST:
            p = _topic_prefix(topic)
            u = (p * _POW31[len(value)] + 31 * int(value.translate(_Q), 31) + int(value.translate(_R), 31)) & _MASK
        else:
            u = java_string_hash(f"{topic}#{value.decode('utf-8', 'replace')}") & _MASK
        out.append(key_hash_of(u))
    return out
