"""SEND_BATCH_MESSAGE bodies (spec remoting.md §3.5): entries back to back, one per message::

    off   size  field
    0     4     TOTALSIZE   i32 = 22 + BODYLEN + PROPLEN (the five i32 fields, PROPLEN's 2 bytes, body, props)
    4     4     MAGICCODE   i32 = 0
    8     4     BODYCRC     i32 = 0 (nothing checks it; we accept 0 or the body's real CRC)
    12    4     FLAG        i32
    16    4     BODYLEN     i32, then BODYLEN bytes
    20+n  2     PROPLEN     i16, then PROPLEN bytes of properties (Java 4.9.7: no trailing \\x02)

The spec table says 20 + bodyLen + propLen; Java's ``MessageDecoder.encodeMessage``, the Go client's
``Message.Marshal`` and the C++ client's ``BatchMessage::encode`` all write 22 + bodyLen + propLen, so that is
what we write and demand.

``decode_batch`` raises ``BatchError`` naming the entry, its byte offset and why.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping

from remoting.message_codec.errors import BatchError, MessageCodecError
from remoting.message_codec.properties import MAX_PROPERTIES_LEN, decode_properties, properties_to_string

BATCH_ENTRY_OVERHEAD = 22  # a batch entry with an empty body and no properties
BATCH_HEADER = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN
_I16 = struct.Struct(">h")


BatchEntry = tuple[int, bytes, bytes | dict[str, str]]  # (flag, body, properties as raw bytes or a dict)


def encode_batch(messages: Iterable[tuple[int, bytes, Mapping[str, str] | bytes]]) -> bytes:
    """A SEND_BATCH_MESSAGE body from ``(flag, body, properties)`` tuples; properties as a dict (written without
    a trailing \\x02, like Java 4.9.7) or already-encoded bytes. BatchError for what cannot be encoded."""
    buf = bytearray()
    pack = BATCH_HEADER.pack
    for i, (flag, body, props) in enumerate(messages):
        at = len(buf)
        try:
            raw = props if isinstance(props, bytes | bytearray | memoryview) else properties_to_string(props).encode()
        except MessageCodecError as exc:
            raise BatchError(i, at, exc.message) from None
        if len(raw) > MAX_PROPERTIES_LEN:
            raise BatchError(i, at, f"properties are {len(raw)} bytes, the limit is {MAX_PROPERTIES_LEN}")
        try:
            buf += pack(BATCH_ENTRY_OVERHEAD + len(body) + len(raw), 0, 0, flag, len(body))
        except struct.error:
            raise BatchError(i, at, f"flag {flag} or body length {len(body)} does not fit in an i32") from None
        buf += body
        buf += _I16.pack(len(raw))
        buf += raw
    if not buf:
        raise BatchError(0, 0, "a batch carries at least one message")
    return bytes(buf)


def decode_batch(
    body: bytes | bytearray | memoryview, max_messages: int, max_body: int, *, properties_as_dict: bool = False
) -> list[BatchEntry]:
    """The ``(flag, body, properties)`` of every entry of a SEND_BATCH_MESSAGE body, in order.

    ``properties`` is the raw bytes (what the broker re-joins with the batch's own properties) unless
    ``properties_as_dict``. At most ``max_messages`` entries and ``max_body`` bytes per message body; any other
    inconsistency (sizes that disagree, a non-zero MAGICCODE, a BODYCRC that is neither 0 nor the body's CRC,
    a torn tail, an empty body) raises BatchError naming the entry."""
    if type(body) is not bytes:
        body = bytes(body)
    end = len(body)
    if not end:
        raise BatchError(0, 0, "the body is empty; a batch carries at least one message")
    unpack = BATCH_HEADER.unpack_from
    out: list[BatchEntry] = []
    add = out.append
    pos = 0
    while pos < end:
        i = len(out)
        if i >= max_messages:
            raise BatchError(i, pos, f"more than {max_messages} messages in one batch")
        if end - pos < BATCH_ENTRY_OVERHEAD:
            raise BatchError(i, pos, f"{end - pos} trailing bytes; an entry has at least {BATCH_ENTRY_OVERHEAD}")
        total, magic, crc, flag, body_len = unpack(body, pos)
        if magic != 0:
            raise BatchError(i, pos, f"MAGICCODE is {magic & 0xFFFFFFFF:#010x}, a batch entry has 0")
        if body_len < 0 or body_len > max_body:
            raise BatchError(i, pos, f"BODYLEN {body_len} outside [0, {max_body}]")
        body_at = pos + 20
        props_len_at = body_at + body_len
        if props_len_at + 2 > end:
            raise BatchError(i, pos, f"BODYLEN {body_len} runs past the end of the batch ({end - pos} bytes left)")
        props_len = (body[props_len_at] << 8) | body[props_len_at + 1]
        if props_len >= 0x8000:
            raise BatchError(i, pos, f"PROPLEN {props_len - 0x10000} is negative")
        if total != BATCH_ENTRY_OVERHEAD + body_len + props_len:
            raise BatchError(i, pos, f"TOTALSIZE {total} is not 22 + BODYLEN {body_len} + PROPLEN {props_len}")
        entry_end = pos + total
        if entry_end > end:
            raise BatchError(i, pos, f"the entry needs {total} bytes, {end - pos} are left")
        msg_body = body[body_at:props_len_at]
        if crc and crc != zlib.crc32(msg_body) & 0x7FFFFFFF:
            raise BatchError(i, pos, f"BODYCRC {crc} is neither 0 nor the body's CRC")
        props = body[props_len_at + 2 : entry_end]
        add((flag, msg_body, decode_properties(props) if properties_as_dict else props))
        pos = entry_end
    return out
