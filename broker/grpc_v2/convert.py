"""proto <-> domain: a v2 ``Message`` to a ``MessageDraft`` for the store, a stored record to the v2 ``Message`` a
consumer receives (RocketMQ's proxy ``GrpcConverter``).

Property mapping (RocketMQ's names, so remoting consumers see the same message): tag -> ``TAGS``, keys ->
``KEYS`` (space-joined), message_id -> ``UNIQ_KEY``, message_group -> ``__SHARDINGKEY``, delivery_timestamp ->
``TIMER_DELIVER_MS`` plus the ``DELAY`` level that parks it (pyrmq has delay levels, not RocketMQ 5's timer wheel:
the smallest level not shorter than the delay, so a message is never delivered early; later than the highest
level is refused). User properties are stored as they are, except names RocketMQ reserves (its system
properties, those ``validate`` checks among them: RocketMQ's proxy refuses them as ILLEGAL_MESSAGE_PROPERTY_KEY).

The way out is strict too: a stored record whose fields a v2 consumer cannot take (a TIMER_DELIVER_MS that is not
a time, a timestamp outside protobuf's range, a count past int32, a body flagged zlib-compressed that does not
inflate within ``max_inflated``) raises ``Unconvertible``, which the receive
path treats as that one message's problem (pop/service.py: to the group's DLQ), never the queue's. A zlib body (a
RocketMQ 4 producer compresses bodies over 4 KiB) is inflated, as RocketMQ's proxy hands bodies out: the v2
``body_encoding`` stays IDENTITY. LZ4 and zstd bodies, which pyrmq does not inflate, are given as stored.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from google.protobuf.duration_pb2 import Duration

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.processors import validate
from broker.store.types import MessageDraft
from remoting.headers import INT_MAX, NumberError, parse_int
from remoting.message_codec import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
# read for every message: an attribute of a protobuf enum is a Python-level __getattr__, a module constant is not
_BAD_ID, _BAD_PROPERTY = pb.Code.ILLEGAL_MESSAGE_ID, pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY
_BAD_TAG, _BAD_KEY, _BAD_GROUP = pb.Code.ILLEGAL_MESSAGE_TAG, pb.Code.ILLEGAL_MESSAGE_KEY, pb.Code.ILLEGAL_MESSAGE_GROUP
_CRC32, _IDENTITY = pb.DigestType.CRC32, pb.Encoding.IDENTITY
_FIFO, _DELAY, _NORMAL = pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.NORMAL
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_POP_CK = "POP_CK"
KEY_SEPARATOR = " "
RESERVED = frozenset({
    PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_SHARDING_KEY,
    PROPERTY_TIMER_DELIVER_MS, PROPERTY_RETRY_TOPIC, "WAIT", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "CLUSTER",
    "MIN_OFFSET", "MAX_OFFSET", "ORIGIN_MESSAGE_ID", PROPERTY_POP_CK, *validate.CHECKED_PROPERTIES,
})
MIN_TIMESTAMP_S, MAX_TIMESTAMP_S = -62_135_596_800, 253_402_300_799  # protobuf Timestamp: years 0001..9999


class Unconvertible(ValueError):
    """A stored record a v2 consumer cannot be given as it is; the text says which field."""


class BadMessage(ValueError):
    """A message the broker refuses; ``code`` is the v2 code, the text says what to fix."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def _clean(value: str, what: str, code: int) -> str:
    if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
        raise BadMessage(code, f"{what} {value[:40]!r} contains \\x01 or \\x02, which RocketMQ reserves; remove them")
    return value


def delay_level(delay_ms: int, levels_ms: Sequence[int]) -> int:
    """The smallest level (1-based) whose delay is at least ``delay_ms``; 0 (none) when already due; -1 past the
    highest level."""
    if delay_ms <= 0:
        return 0
    for level, ms in enumerate(levels_ms, start=1):
        if ms >= delay_ms:
            return level
    return -1


def to_draft(
    msg: pb.Message, *, born_host: tuple[str, int], levels_ms: Sequence[int], max_body: int, now_ms: int, cluster: str
) -> MessageDraft:
    sp = msg.system_properties
    body = msg.body
    if not body:
        raise BadMessage(pb.Code.BAD_REQUEST, "the message body is empty; send a non-empty body")
    if len(body) > max_body:
        raise BadMessage(
            pb.Code.MESSAGE_BODY_TOO_LARGE, f"the body is {len(body)} bytes, over maxMessageSize {max_body}; split it"
        )
    if not sp.message_id:
        raise BadMessage(pb.Code.ILLEGAL_MESSAGE_ID, "system_properties.message_id is empty; the client sets it")
    if len(sp.message_id) > validate.MAX_UNIQ_KEY_LEN:
        raise BadMessage(pb.Code.ILLEGAL_MESSAGE_ID, f"message_id is {len(sp.message_id)} characters, the limit is"
                         f" {validate.MAX_UNIQ_KEY_LEN}; let the client set it")
    props: dict[str, str] = {}
    for name, value in msg.user_properties.items():
        if name in RESERVED:
            raise BadMessage(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {name!r} is a name RocketMQ reserves;"
                             " rename it")
        props[_clean(name, "user property name", _BAD_PROPERTY)] = _clean(value, "user property value", _BAD_PROPERTY)
    props[PROPERTY_UNIQ_KEY] = _clean(sp.message_id, "message_id", _BAD_ID)
    if sp.HasField("tag") and sp.tag:
        if "||" in sp.tag:
            raise BadMessage(pb.Code.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag!r} contains '||'; use one tag per message")
        props[PROPERTY_TAGS] = _clean(sp.tag, "tag", _BAD_TAG)
    if sp.keys:
        props[PROPERTY_KEYS] = KEY_SEPARATOR.join(_clean(k, "key", _BAD_KEY) for k in sp.keys)
    if sp.HasField("message_group") and sp.message_group:
        props[PROPERTY_SHARDING_KEY] = _clean(sp.message_group, "message_group", _BAD_GROUP)
    if sp.HasField("delivery_timestamp"):
        deliver_ms = sp.delivery_timestamp.seconds * 1000 + sp.delivery_timestamp.nanos // 1_000_000
        if not 0 <= deliver_ms <= validate.MAX_TIMESTAMP_MS:
            raise BadMessage(pb.Code.ILLEGAL_DELIVERY_TIME, f"delivery_timestamp {sp.delivery_timestamp.seconds} s is"
                             " not a time in 1970..9999; send a time in ms since the epoch")
        level = delay_level(deliver_ms - now_ms, levels_ms)
        if level < 0:
            raise BadMessage(
                pb.Code.ILLEGAL_DELIVERY_TIME,
                f"delivery_timestamp is {(deliver_ms - now_ms) // 1000} s away, past the highest delay level"
                f" ({levels_ms[-1] // 1000} s, messageDelayLevel); pyrmq delays by levels: deliver sooner",
            )
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
        if level:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    props["CLUSTER"] = cluster
    born_ms = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000 if sp.HasField(
        "born_timestamp") else now_ms
    if not 0 <= born_ms <= validate.MAX_TIMESTAMP_MS:
        raise BadMessage(pb.Code.BAD_REQUEST, f"born_timestamp {sp.born_timestamp.seconds} s is not a time in"
                         " 1970..9999; send the send time")
    return MessageDraft(body=body, properties=props, born_timestamp=born_ms, born_host=born_host)


def _timestamp(ms: int, what: str):
    from google.protobuf.timestamp_pb2 import Timestamp

    seconds = ms // 1000
    if not MIN_TIMESTAMP_S <= seconds <= MAX_TIMESTAMP_S:
        raise Unconvertible(f"{what} {ms} ms is outside protobuf's Timestamp range (years 0001..9999)")
    return Timestamp(seconds=seconds, nanos=(ms % 1000) * 1_000_000)


def _body(m: StoredMessage, max_inflated: int) -> bytes:
    flag = m.sys_flag
    zlib_type = (flag & validate.COMPRESSION_TYPE_MASK) in (0, validate.COMPRESSION_ZLIB)
    if not flag & validate.COMPRESSED_FLAG or not zlib_type:
        return m.body
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(m.body, max_inflated)
    except zlib.error as exc:
        raise Unconvertible(f"sysFlag {flag:#x} says the body is zlib-compressed but it does not inflate ({exc})"
                            ) from None
    if inflater.unconsumed_tail:
        raise Unconvertible(f"the compressed body inflates past {max_inflated} bytes")
    if not inflater.eof:
        raise Unconvertible("the compressed body ends before its zlib stream does")
    return body


def to_proto(
    m: StoredMessage, *, topic: str, receipt_handle: str, invisible_ms: int, store_host: str, namespace: str = "",
    attempt: int = 0, max_inflated: int = validate.MAX_INFLATED_FACTOR * 4 * 1024 * 1024,
) -> pb.Message:
    """A stored record as the v2 message a consumer receives: ``topic`` is the one it subscribed (retry copies
    show the original), delivery_attempt = ``attempt`` (FIFO pop counts deliveries itself) or else reconsumeTimes
    + 1, a CRC32 body digest in upper-case hex. ``Unconvertible`` when a field cannot be given to a consumer."""
    props = m.properties
    body = _body(m, max_inflated)
    delivery_attempt = attempt or m.reconsume_times + 1
    if not 0 < delivery_attempt <= INT_MAX:
        raise Unconvertible(f"reconsumeTimes {m.reconsume_times} does not give a delivery attempt in 1..{INT_MAX}")
    sp = pb.SystemProperties(
        message_id=props.get(PROPERTY_UNIQ_KEY) or m.msg_id,
        body_digest=pb.Digest(type=_CRC32, checksum=format(zlib.crc32(body) & 0xFFFFFFFF, "08X")),
        body_encoding=_IDENTITY,
        born_timestamp=_timestamp(m.born_timestamp, "bornTimestamp"),
        born_host=m.born_host[0],
        store_timestamp=_timestamp(m.store_timestamp, "storeTimestamp"),
        store_host=store_host,
        receipt_handle=receipt_handle,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        invisible_duration=Duration(seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 1_000_000),
        delivery_attempt=delivery_attempt,
    )
    if props.get(PROPERTY_TAGS):
        sp.tag = props[PROPERTY_TAGS]
    if props.get(PROPERTY_KEYS):
        sp.keys.extend(k for k in props[PROPERTY_KEYS].split(KEY_SEPARATOR) if k)
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp.message_group = group
        sp.message_type = _FIFO
    elif PROPERTY_TIMER_DELIVER_MS in props:
        sp.message_type = _DELAY
        try:  # int() would take "٣" as 3 and fail on "²"
            deliver_ms = parse_int(props[PROPERTY_TIMER_DELIVER_MS], 0, validate.MAX_TIMESTAMP_MS,
                                   what=PROPERTY_TIMER_DELIVER_MS)
        except NumberError as exc:
            raise Unconvertible(str(exc)) from None
        sp.delivery_timestamp.CopyFrom(_timestamp(deliver_ms, PROPERTY_TIMER_DELIVER_MS))
    else:
        sp.message_type = _NORMAL
    user = {k: v for k, v in props.items() if k not in RESERVED and not k.startswith(("1ST_POP", "POP_"))}
    return pb.Message(
        topic=pb.Resource(resource_namespace=namespace, name=topic), user_properties=user, system_properties=sp,
        body=body,
    )
