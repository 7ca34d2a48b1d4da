"""RocketMQ's message-trace encoding (client TraceDataEncoder, TraceConstants): pure, no I/O.

A trace message's body is a run of records, each a list of fields joined by ``\\x01`` (CONTENT_SPLITOR) and ended by
``\\x02`` (FIELD_SPLITOR). The first field names the record's type; the order of the rest is fixed per type:

- ``Pub``: timestamp, regionId, producer group, topic, msgId, tags, keys, storeHost, bodyLength, costTime (ms),
  msgType (MessageType ordinal), offsetMsgId, success. Readers also take 13 fields (no offsetMsgId) and a
  15th, the client host, as RocketMQ's decoder does.
- ``SubBefore``: timestamp, regionId, consumer group, requestId, msgId, retryTimes, keys.
- ``SubAfter``: requestId, msgId, costTime (ms), success, keys, contextCode (ConsumeReturnType ordinal),
  timestamp. It names no group: a reader pairs it with the SubBefore of the same requestId and msgId.

Java appends a missing (null) string as ``null``: an empty text field is written that way and read back as empty,
so a field holding the text ``null`` reads as empty too. Other record types (EndTransaction, ...) are skipped.
The trace message's KEYS are every record's msgId and keys (``trace_keys``), so a key query on the trace topic
finds a message's records.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # TopicValidator.RMQ_SYS_TRACE_TOPIC
TRACE_PRODUCER_GROUP = "PID_CLIENT_INNER_TRACE_PRODUCER"  # TraceConstants.TRACE_INSTANCE_NAME
DEFAULT_REGION = "DefaultRegion"  # MixAll.DEFAULT_TRACE_REGION_ID
MAX_TRACE_MSG_BYTES = 128_000  # AsyncTraceDispatcher's maxMsgSize
NULL = "null"


class TraceType(enum.Enum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"


class MessageType(enum.IntEnum):
    """RocketMQ's common.message.MessageType, by ordinal."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


class ConsumeReturnType(enum.IntEnum):
    """RocketMQ's ConsumeReturnType, by ordinal (SubAfter's contextCode)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


class TraceCodecError(ValueError):
    """A record that cannot be written (a separator inside a field) or read (a field that is not a number)."""


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One trace record; the fields a type does not carry keep their defaults."""

    type: TraceType
    timestamp: int = 0
    region_id: str = DEFAULT_REGION
    group: str = ""
    request_id: str = ""
    topic: str = ""
    msg_id: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: int = MessageType.NORMAL
    offset_msg_id: str = ""
    success: bool = True
    retry_times: int = 0
    context_code: int = ConsumeReturnType.SUCCESS
    client_host: str = ""  # Pub's optional 15th field


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _checked(text: str, separators: int) -> str:
    """``text`` when its fields held no separator (it has exactly ``separators`` \\x01 and no \\x02)."""
    if text.count(CONTENT_SPLITOR) != separators or FIELD_SPLITOR in text:
        raise TraceCodecError(f"a trace field of {text[:200]!r} contains \\x01 or \\x02, RocketMQ's trace separators")
    return text + FIELD_SPLITOR


def pub_text(timestamp: int, region_id: str, group: str, topic: str, msg_id: str, tags: str, keys: str,
             store_host: str, body_length: int, cost_ms: int, msg_type: int, offset_msg_id: str, success: bool,
             client_host: str = "") -> str:
    """A Pub record with its trailing ``\\x02`` (the producer's hot path: one f-string, one check)."""
    text = (f"Pub\x01{timestamp}\x01{region_id or NULL}\x01{group or NULL}\x01{topic or NULL}\x01{msg_id or NULL}"
            f"\x01{tags or NULL}\x01{keys or NULL}\x01{store_host or NULL}\x01{body_length}\x01{cost_ms}"
            f"\x01{int(msg_type)}\x01{offset_msg_id or NULL}\x01{'true' if success else 'false'}")
    if client_host:
        return _checked(f"{text}\x01{client_host}", 14)
    return _checked(text, 13)


def sub_before_text(timestamp: int, region_id: str, group: str, request_id: str, msg_id: str, retry_times: int,
                    keys: str) -> str:
    return _checked(f"SubBefore\x01{timestamp}\x01{region_id or NULL}\x01{group or NULL}\x01{request_id or NULL}"
                    f"\x01{msg_id or NULL}\x01{retry_times}\x01{keys or NULL}", 7)


def sub_after_text(request_id: str, msg_id: str, cost_ms: int, success: bool, keys: str, context_code: int,
                   timestamp: int) -> str:
    return _checked(f"SubAfter\x01{request_id or NULL}\x01{msg_id or NULL}\x01{cost_ms}"
                    f"\x01{'true' if success else 'false'}\x01{keys or NULL}\x01{int(context_code)}\x01{timestamp}", 7)


def encode_record(r: TraceRecord) -> str:
    """One record with its trailing ``\\x02``."""
    if r.type is TraceType.PUB:
        return pub_text(r.timestamp, r.region_id, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host,
                        r.body_length, r.cost_ms, r.msg_type, r.offset_msg_id, r.success, r.client_host)
    if r.type is TraceType.SUB_BEFORE:
        return sub_before_text(r.timestamp, r.region_id, r.group, r.request_id, r.msg_id, r.retry_times, r.keys)
    return sub_after_text(r.request_id, r.msg_id, r.cost_ms, r.success, r.keys, r.context_code, r.timestamp)


def encode(records: Iterable[TraceRecord]) -> str:
    return "".join(encode_record(r) for r in records)


def trace_keys(records: Iterable[TraceRecord]) -> list[str]:
    """The trace message's keys: each record's msgId and keys, first occurrence order, no duplicates."""
    return _keys((r.msg_id, r.keys) for r in records)


def _keys(pairs: Iterable[tuple[str, str]]) -> list[str]:
    seen: dict[str, None] = {}
    for msg_id, keys in pairs:
        if msg_id:
            seen[msg_id] = None
        if keys:
            for k in keys.split(" "):
                if k:
                    seen[k] = None
    return list(seen)


def _str(value: str) -> str:
    return "" if value == NULL else value


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise TraceCodecError(f"trace field {what} is {value!r}, not a number") from None


def _parse_bool(value: str) -> bool:
    return value.lower() == "true"  # Java's Boolean.parseBoolean


def decode_record(text: str) -> TraceRecord | None:
    """One record (without its ``\\x02``); None for a type this module does not read."""
    f = text.split(CONTENT_SPLITOR)
    kind = f[0]
    try:
        if kind == TraceType.PUB.value:
            if len(f) < 13:
                raise TraceCodecError(f"a Pub record has {len(f)} fields, at least 13 are needed")
            offset_id, success = ("", f[12]) if len(f) == 13 else (_str(f[12]), f[13])
            return TraceRecord(TraceType.PUB, _int(f[1], "timestamp"), _str(f[2]), _str(f[3]), topic=_str(f[4]),
                               msg_id=_str(f[5]), tags=_str(f[6]), keys=_str(f[7]), store_host=_str(f[8]),
                               body_length=_int(f[9], "bodyLength"), cost_ms=_int(f[10], "costTime"),
                               msg_type=_int(f[11], "msgType"), offset_msg_id=offset_id,
                               success=_parse_bool(success), client_host=_str(f[14]) if len(f) >= 15 else "")
        if kind == TraceType.SUB_BEFORE.value:
            if len(f) < 8:
                raise TraceCodecError(f"a SubBefore record has {len(f)} fields, 8 are needed")
            return TraceRecord(TraceType.SUB_BEFORE, _int(f[1], "timestamp"), _str(f[2]), _str(f[3]),
                               request_id=_str(f[4]), msg_id=_str(f[5]), retry_times=_int(f[6], "retryTimes"),
                               keys=_str(f[7]))
        if kind == TraceType.SUB_AFTER.value:
            if len(f) < 6:
                raise TraceCodecError(f"a SubAfter record has {len(f)} fields, at least 6 are needed")
            return TraceRecord(TraceType.SUB_AFTER, _int(f[7], "timestamp") if len(f) >= 8 else 0,
                               request_id=_str(f[1]), msg_id=_str(f[2]), cost_ms=_int(f[3], "costTime"),
                               success=_parse_bool(f[4]), keys=_str(f[5]),
                               context_code=_int(f[6], "contextCode") if len(f) >= 7 else 0)
    except IndexError:  # pragma: no cover - lengths are checked above
        raise TraceCodecError(f"a {kind} record is too short") from None
    return None


def decode(data: str) -> list[TraceRecord]:
    """Every record of a trace message body this module reads; TraceCodecError for a malformed one."""
    out = []
    for part in data.split(FIELD_SPLITOR):
        if part:
            r = decode_record(part)
            if r is not None:
                out.append(r)
    return out


def pack(records: list[TraceRecord], max_bytes: int = MAX_TRACE_MSG_BYTES) -> list[tuple[str, list[str]]]:
    """Records as trace message (body, keys) pairs, each body at most ``max_bytes`` (a longer single record goes
    alone), in order."""
    return pack_texts([(encode_record(r), r.msg_id, r.keys) for r in records], max_bytes)


def pack_texts(items: list[tuple[str, str, str]], max_bytes: int = MAX_TRACE_MSG_BYTES) -> list[tuple[str, list[str]]]:
    """``pack`` for records already encoded: (text, msgId, keys) triples."""
    out: list[tuple[str, list[str]]] = []
    first = size = 0
    for i, (text, _, _) in enumerate(items):
        n = len(text) if text.isascii() else len(text.encode())
        if i > first and size + n > max_bytes:
            out.append(_message(items, first, i))
            first, size = i, 0
        size += n
    if first < len(items):
        out.append(_message(items, first, len(items)))
    return out


def _message(items: list[tuple[str, str, str]], lo: int, hi: int) -> tuple[str, list[str]]:
    part = items[lo:hi]
    return "".join(t for t, _, _ in part), _keys((m, k) for _, m, k in part)
