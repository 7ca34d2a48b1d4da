"""Properties (spec remoting.md §3.3): a message's named attributes as one string, ``name\\x01value`` pairs joined
by ``\\x02``, and the names RocketMQ gives meaning to.

The parser accepts a trailing ``\\x02`` or none, splits each pair at its first ``\\x01`` and, as Java does, drops
pairs with an empty name or value; later names win. Names and values must not contain the separators (the
encoders refuse them). The stored form always ends with ``\\x02`` (``check_record`` demands it); the send
header's and batch entries' form does not (Java 4.9.7's messageProperties2String).
"""

from __future__ import annotations

from collections.abc import Mapping

from remoting.message_codec.errors import MessageCodecError

MAX_PROPERTIES_LEN = 32767  # PROPERTIESLENGTH is an i16

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Property keys (RocketMQ MessageConst).
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"


def _join_properties(props: Mapping[str, str], trailing: bool) -> str:
    pairs = [f"{k}\x01{v}" for k, v in props.items() if v is not None]  # Java skips null values
    text = "\x02".join(pairs)
    if text.count("\x01") != len(pairs) or text.count("\x02") != max(len(pairs) - 1, 0):
        raise MessageCodecError("a property name or value contains \\x01 or \\x02 (the separators)")
    return text + "\x02" if trailing and pairs else text


def properties_to_string(props: Mapping[str, str]) -> str:
    """Java 4.9.7's messageProperties2String: no trailing \\x02 (the send header's ``properties``, batch entries)."""
    return _join_properties(props, False) if props else ""


def encode_properties(props: Mapping[str, str]) -> bytes:
    """The stored form: UTF-8, every pair ended by \\x02 (``check_record`` demands the final one)."""
    return _join_properties(props, True).encode("utf-8") if props else b""


def string_to_properties(text: str) -> dict[str, str]:
    """§3.3's parser: a trailing \\x02 or none; pairs with an empty name or value are dropped; later names win."""
    out: dict[str, str] = {}
    for item in text.split("\x02"):
        name, _, value = item.partition("\x01")
        if name and value:
            out[name] = value
    return out


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """``string_to_properties`` of UTF-8 bytes (invalid sequences become U+FFFD, as Java's ``new String``)."""
    if not data:
        return {}
    return string_to_properties(bytes(data).decode("utf-8", "replace"))


def property_value(data: bytes, key: str) -> str | None:
    """One stored property without building the dict (the dispatcher reads TAGS/DELAY this way): the first
    ``key``'s value as written ("" for an empty one), None when absent."""
    if not data:
        return None
    needle = key.encode() + b"\x01"
    raw = bytes(data)
    start = 0 if raw.startswith(needle) else -1
    if start < 0:
        idx = raw.find(b"\x02" + needle)
        if idx < 0:
            return None
        start = idx + 1
    start += len(needle)
    end = raw.find(b"\x02", start)
    return raw[start : end if end >= 0 else len(raw)].decode("utf-8", "replace")
