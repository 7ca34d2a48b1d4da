"""Message codec shared by the broker, the SDK and the Spark connector: stored records, SEND_BATCH_MESSAGE
bodies, properties strings, msgIds (spec remoting.md §3.3, §3.5, §4.5, §6.5). Pure: no I/O, no clocks.

Every integer is big-endian two's complement (Java ``ByteBuffer``). **Stored record**, RocketMQ's v1 layout
with IPv4 born/store hosts (the only hosts the store writes); the commitlog holds these, and a pull answer's body
is a concatenation of them::

    off  size  field
    0    4     TOTALSIZE       i32, whole record, this field included
    4    4     MAGICCODE       i32, 0xDAA320A7 (as a signed i32: -626843481)
    8    4     BODYCRC         i32, zlib.crc32(body) & 0x7FFFFFFF (RocketMQ UtilAll.crc32)
    12   4     QUEUEID         i32
    16   4     FLAG            i32
    20   8     QUEUEOFFSET     i64
    28   8     PHYSICALOFFSET  i64, the record's own commitlog offset
    36   4     SYSFLAG         i32
    40   8     BORNTIMESTAMP   i64
    48   8     BORNHOST        4 address bytes + i32 port
    56   8     STORETIMESTAMP  i64
    64   8     STOREHOST       4 address bytes + i32 port
    72   4     RECONSUMETIMES  i32
    76   8     PREPARED TRANSACTION OFFSET  i64
    84   4     BODYLENGTH      i32, then BODYLENGTH bytes
    ..   1     TOPICLENGTH     u8, then the UTF-8 topic
    ..   2     PROPERTIESLENGTH  i16, then ``k\\x01v\\x02k\\x01v\\x02...`` (the store always ends it with \\x02)

TOTALSIZE = 91 + body + topic + properties. A record whose TOTALSIZE disagrees with its own length fields is
corrupt, and so is one with an empty or NUL-containing topic or properties that do not end in ``\\x02`` (the body
CRC covers only the body, so these shape checks are what catch a zeroed tail). The topic length is read unsigned
so retry/DLQ topics up to 255 bytes survive a round trip (RocketMQ 4.x wrote a signed byte and broke them).

End-of-file **blank**: ``[i32 remaining][i32 0xCBD43194]`` marks the rest of a commitlog file as unused.

**SEND_BATCH_MESSAGE body** (§3.5): entries back to back, one per message::

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

**Properties** (§3.3): ``name\\x01value`` pairs joined by ``\\x02``. The parser accepts a trailing ``\\x02`` or
none, splits each pair at its first ``\\x01`` and, as Java does, drops pairs with an empty name or value; later
names win. Names and values must not contain the separators (the encoders refuse them).

**msgIds** (§6.5): the offset msgId is upper-case hex of store IPv4 (4) + port (i32) + commitlog offset (i64),
32 characters. UNIQ_KEY (the client id) is 32 upper-case hex characters: 20 fixed per process (IPv4 address,
pid & 0xFFFF, 4 random bytes), 8 of milliseconds since the generator's epoch (mod 2**32), 4 of a counter (mod
2**16); two ids of one generator differ unless 65,536 are made within one millisecond.

``check_record`` is the one validator used by recovery, the dispatcher and the replicated-bytes tail parser: it
tells a VALID record from a BLANK end of file, an INCOMPLETE one (more bytes may still arrive, e.g. a record split
across two HA frames) and CORRUPT bytes. ``decode`` / ``iter_records`` raise ``RecordError`` and
``decode_batch`` raises ``BatchError`` (both ``MessageCodecError``), saying where and why. Nothing here keeps
state except small caches and a ``UniqIdGenerator``'s counter, so everything is task- and thread-safe.
"""

from __future__ import annotations

import enum
import functools
import itertools
import re
import socket
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from common.errors import PyrmqError

MESSAGE_MAGIC = -626843481  # 0xDAA320A7 as Java's int
BLANK_MAGIC = -875286124  # 0xCBD43194
MIN_RECORD_SIZE = 91  # empty body, topic and properties
BLANK_SIZE = 8
MAX_TOPIC_LEN = 127
MAX_RETRY_TOPIC_LEN = 255
MAX_PROPERTIES_LEN = 32767
# Largest record check_record accepts by default: RocketMQ's 4 MiB body limit plus the widest headers.
DEFAULT_MAX_RECORD_SIZE = 4 * 1024 * 1024 + MIN_RECORD_SIZE + MAX_RETRY_TOPIC_LEN + MAX_PROPERTIES_LEN
BATCH_ENTRY_OVERHEAD = 22  # a batch entry with an empty body and no properties

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

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

# Everything up to and including BODYLENGTH: 88 bytes.
HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")
HEADER_SIZE = HEADER.size  # 88
BATCH_HEADER = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN
_I32_PAIR = struct.Struct(">ii")
_I16 = struct.Struct(">h")
_HOST = struct.Struct(">4si")
_OFFSET_ID = struct.Struct(">4siq")

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class MessageCodecError(PyrmqError):
    """Bytes or values that this codec cannot turn into a message (or back)."""


class RecordError(MessageCodecError):
    """Bytes that are not a valid stored record; says where and why."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"bad commitlog record at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class BatchError(MessageCodecError):
    """A SEND_BATCH_MESSAGE body that is not a valid batch; names the message, its byte offset and why."""

    def __init__(self, index: int, offset: int, reason: str) -> None:
        super().__init__(
            f"bad batch body: message {index} at byte {offset}: {reason}",
            hint="each entry is TOTALSIZE=22+BODYLEN+PROPLEN, MAGICCODE 0, BODYCRC, FLAG, BODYLEN+body, PROPLEN+props",
        )
        self.index = index
        self.offset = offset
        self.reason = reason


class RecordStatus(enum.Enum):
    VALID = "VALID"
    BLANK = "BLANK"  # end-of-file filler; size = bytes to skip to the next file
    INCOMPLETE = "INCOMPLETE"  # a prefix of a plausible record; wait for more bytes
    CORRUPT = "CORRUPT"


class DispatchInfo(NamedTuple):
    """What the consume queue needs from a record, read without copying the body."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    store_timestamp: int
    sys_flag: int
    properties: bytes


class CheckResult(NamedTuple):
    status: RecordStatus
    size: int  # record size (VALID), bytes to the file end (BLANK), else 0
    info: DispatchInfo | None
    reason: str = ""


@dataclass(slots=True)
class StoredMessage:
    """A decoded stored record (RocketMQ MessageExt). Field order is pinned: fast decoders build it positionally."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    body_crc: int
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str:
        return self.properties.get(PROPERTY_TAGS, "")

    @property
    def keys(self) -> str:
        return self.properties.get(PROPERTY_KEYS, "")

    @property
    def msg_id(self) -> str:
        """Client message id (UNIQ_KEY) when the producer set one, else the offset message id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)


# hosts and ids -------------------------------------------------------------------------------------------
def host_bytes(ip: str, port: int) -> bytes:
    """8 bytes: IPv4 address + i32 port. Non-IPv4 text (host names) encodes as 0.0.0.0."""
    try:
        addr = socket.inet_aton(ip) if ip.count(".") == 3 else b"\0\0\0\0"
    except OSError:
        addr = b"\0\0\0\0"
    return _HOST.pack(addr, port)


def parse_host(data: bytes) -> tuple[str, int]:
    addr, port = _HOST.unpack_from(data)
    return socket.inet_ntoa(addr), port


_host = functools.lru_cache(maxsize=4096)(parse_host)  # a pull response repeats a few hosts


def offset_msg_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """RocketMQ's offsetMsgId: hex of store IPv4 (4 bytes) + port (4 bytes) + physical offset (8 bytes)."""
    ip, port = store_host
    parts = [int(p) for p in ip.split(".")] if ip.count(".") == 3 else [0, 0, 0, 0]
    return bytes(parts).hex().upper() + f"{port:08X}{physical_offset:016X}"


def parse_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """``((store_ip, port), physical_offset)`` of a 32-character offset msgId; MessageCodecError otherwise."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(msg_id) != 32 or len(raw) != 16:
        raise MessageCodecError(f"offset msgId {msg_id[:64]!r} is not 32 hex characters (IPv4 store host)")
    addr, port, offset = _OFFSET_ID.unpack(raw)
    return (socket.inet_ntoa(addr), port), offset


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (the consume-queue tags code), as a signed 64-bit value like RocketMQ stores it."""
    data = text.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


class TagFilter:
    """A "tagA || tagB" subscription: the consume-queue hash check first, then the exact string."""

    __slots__ = ("codes", "expression", "match_all", "tags")

    def __init__(self, expression: str | None) -> None:
        expr = (expression or "*").strip()
        self.expression = expr
        self.match_all = expr in ("", "*")
        self.tags = frozenset() if self.match_all else frozenset(t.strip() for t in expr.split("||") if t.strip())
        self.codes = frozenset(java_string_hash(t) for t in self.tags)

    def match_code(self, tags_code: int) -> bool:
        return self.match_all or tags_code in self.codes

    def match_tags(self, tags: str) -> bool:
        return self.match_all or tags in self.tags


def uniq_id_prefix(ipv4: str, pid: int, nonce: bytes) -> str:
    """The 20 fixed characters of a process's UNIQ_KEYs: IPv4 address, pid & 0xFFFF, 4 nonce bytes."""
    if len(nonce) != 4:
        raise ValueError(f"the UNIQ_KEY nonce is 4 bytes, got {len(nonce)}")
    try:
        addr = socket.inet_aton(ipv4) if ipv4.count(".") == 3 else b"\x7f\0\0\1"
    except OSError:
        addr = b"\x7f\0\0\1"
    return (addr + (pid & 0xFFFF).to_bytes(2, "big") + nonce).hex().upper()


class UniqIdGenerator:
    """UNIQ_KEYs of one process: ``prefix`` (from ``uniq_id_prefix``), then ms since ``epoch_ms``, then a counter.

    The caller owns the clock (``next_id(now_ms)``) and builds one generator per process."""

    __slots__ = ("_head", "_last_ms", "counter", "epoch_ms", "prefix")

    def __init__(self, prefix: str, epoch_ms: int) -> None:
        if len(prefix) != 20:
            raise ValueError(f"a UNIQ_KEY prefix is 20 hex characters, got {prefix!r}")
        self.prefix = prefix
        self.epoch_ms = epoch_ms
        self.counter = itertools.count()
        self._last_ms = -1
        self._head = ""

    def next_id(self, now_ms: int) -> str:
        if now_ms != self._last_ms:  # the first 28 characters change once per millisecond
            self._last_ms = now_ms
            self._head = f"{self.prefix}{(now_ms - self.epoch_ms) & 0xFFFFFFFF:08X}"
        return f"{self._head}{next(self.counter) & 0xFFFF:04X}"


# properties ----------------------------------------------------------------------------------------------
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


def validate_topic(name: str) -> str | None:
    """Error text for an unusable topic name, or None."""
    if not name:
        return "topic is empty"
    limit = (
        MAX_RETRY_TOPIC_LEN if name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)) else MAX_TOPIC_LEN
    )
    if len(name) > limit:
        return f"topic {name[:40]!r}... is {len(name)} characters, the limit is {limit}"
    if not _TOPIC_RE.match(name):
        return f"topic {name!r} may only use letters, digits, '%', '|', '-' and '_'"
    return None


# stored records: encoding --------------------------------------------------------------------------------
def record_size(topic_len: int, body_len: int, props_len: int) -> int:
    return MIN_RECORD_SIZE + topic_len + body_len + props_len


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_into(
    buf: bytearray,
    *,
    topic_bytes: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    body: bytes,
    properties: bytes,
    prepared_transaction_offset: int = 0,
) -> int:
    """Append one record to ``buf``; returns its size. Callers validate lengths first."""
    size = MIN_RECORD_SIZE + len(topic_bytes) + len(body) + len(properties)
    buf += HEADER.pack(
        size,
        MESSAGE_MAGIC,
        zlib.crc32(body) & 0x7FFFFFFF,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    buf += body
    buf.append(len(topic_bytes))
    buf += topic_bytes
    buf += _I16.pack(len(properties))
    buf += properties
    return size


def encode_record(**fields) -> bytes:
    buf = bytearray()
    encode_into(buf, **fields)
    return bytes(buf)


def blank_record(remaining: int) -> bytes:
    return _I32_PAIR.pack(remaining, BLANK_MAGIC)


# stored records: decoding --------------------------------------------------------------------------------
def check_record(buf, pos: int = 0, *, check_crc: bool = False, max_size: int = DEFAULT_MAX_RECORD_SIZE) -> CheckResult:
    """Classify the bytes at ``pos``: VALID (with dispatch info), BLANK, INCOMPLETE or CORRUPT."""
    avail = len(buf) - pos
    if avail < 8:
        return CheckResult(RecordStatus.INCOMPLETE, 0, None, f"only {avail} bytes")
    total, magic = _I32_PAIR.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        if total < BLANK_SIZE:
            return CheckResult(RecordStatus.CORRUPT, 0, None, f"blank record claims {total} bytes")
        return CheckResult(RecordStatus.BLANK, total, None)
    if magic != MESSAGE_MAGIC:
        return CheckResult(RecordStatus.CORRUPT, 0, None, f"magic code {magic & 0xFFFFFFFF:#010x}")
    if total < MIN_RECORD_SIZE or total > max_size:
        return CheckResult(RecordStatus.CORRUPT, 0, None, f"total size {total} outside [{MIN_RECORD_SIZE}, {max_size}]")
    if avail < total:
        return CheckResult(RecordStatus.INCOMPLETE, 0, None, f"record of {total} bytes, {avail} available")
    (_, _, crc, queue_id, _flag, queue_offset, phy_offset, sys_flag, _, _, store_ts, _, _, _, body_len) = (
        HEADER.unpack_from(buf, pos)
    )
    if body_len < 0 or HEADER_SIZE + body_len + 3 > total:
        return CheckResult(RecordStatus.CORRUPT, 0, None, f"body length {body_len} does not fit in {total}")
    p = pos + HEADER_SIZE + body_len
    topic_len = buf[p]
    props_at = p + 1 + topic_len
    if props_at + 2 > pos + total:
        return CheckResult(RecordStatus.CORRUPT, 0, None, f"topic length {topic_len} does not fit")
    (props_len,) = _I16.unpack_from(buf, props_at)
    if props_len < 0 or record_size(topic_len, body_len, props_len) != total:
        return CheckResult(RecordStatus.CORRUPT, 0, None, f"total size {total} disagrees with the length fields")
    if check_crc:
        body_at = pos + HEADER_SIZE
        if zlib.crc32(buf[body_at : body_at + body_len]) & 0x7FFFFFFF != crc:
            return CheckResult(RecordStatus.CORRUPT, 0, None, "body CRC mismatch")
    # The body CRC covers only the body; these cheap shape checks catch a zeroed or garbled head/tail.
    topic_raw = bytes(buf[p + 1 : props_at])
    props = bytes(buf[props_at + 2 : props_at + 2 + props_len])
    if not topic_raw or 0 in topic_raw:
        return CheckResult(RecordStatus.CORRUPT, 0, None, "topic is empty or contains NUL bytes")
    if props and (props[-1] != 2 or 1 not in props):
        return CheckResult(RecordStatus.CORRUPT, 0, None, "properties are not k\\x01v\\x02 pairs")
    try:
        topic = topic_raw.decode("utf-8")
    except UnicodeDecodeError:
        return CheckResult(RecordStatus.CORRUPT, 0, None, "topic is not UTF-8")
    info = DispatchInfo(topic, queue_id, queue_offset, phy_offset, total, store_ts, sys_flag, props)
    return CheckResult(RecordStatus.VALID, total, info)


def decode(buf, offset: int = 0, *, check_crc: bool = False) -> StoredMessage:
    """One record at ``offset`` as a StoredMessage; RecordError says where and why when it is not one.

    The same checks as ``check_record`` in one pass (the general decoder: any buffer type)."""
    end = len(buf)
    if end - offset >= HEADER_SIZE + 3:
        (
            total,
            magic,
            crc,
            queue_id,
            flag,
            queue_offset,
            phy_offset,
            sys_flag,
            born_ts,
            born_host,
            store_ts,
            store_host,
            reconsume,
            prep,
            body_len,
        ) = HEADER.unpack_from(buf, offset)
        body_at = offset + HEADER_SIZE
        p = body_at + body_len
        if (
            magic == MESSAGE_MAGIC
            and MIN_RECORD_SIZE <= total <= end - offset
            and 0 <= body_len
            and HEADER_SIZE + body_len + 3 <= total
            and p + 3 + buf[p] <= offset + total
        ):
            topic_len = buf[p]
            props_at = p + 1 + topic_len
            (props_len,) = _I16.unpack_from(buf, props_at)
            topic_raw = bytes(buf[p + 1 : props_at])
            props = bytes(buf[props_at + 2 : props_at + 2 + props_len])
            body = bytes(buf[body_at:p])
            if (
                MIN_RECORD_SIZE + topic_len + body_len + props_len == total
                and props_len >= 0
                and topic_raw
                and 0 not in topic_raw
                and (not props or (props[-1] == 2 and 1 in props))
                and (not check_crc or zlib.crc32(body) & 0x7FFFFFFF == crc)
            ):
                try:
                    topic = topic_raw.decode("utf-8")
                except UnicodeDecodeError:
                    topic = None
                if topic is not None:
                    return StoredMessage(
                        topic=topic,
                        queue_id=queue_id,
                        queue_offset=queue_offset,
                        physical_offset=phy_offset,
                        store_size=total,
                        body=body,
                        properties=decode_properties(props),
                        flag=flag,
                        sys_flag=sys_flag,
                        born_timestamp=born_ts,
                        born_host=_host(born_host),
                        store_timestamp=store_ts,
                        store_host=_host(store_host),
                        reconsume_times=reconsume,
                        body_crc=crc,
                        prepared_transaction_offset=prep,
                    )
    result = check_record(buf, offset, check_crc=check_crc)  # the slow path only to say why
    raise RecordError(offset, result.reason or result.status.value.lower())


def iter_records(buf, *, check_crc: bool = False) -> Iterator[StoredMessage]:
    """Decode concatenated records (a pull response); RecordError on anything else, including a torn tail."""
    pos, end = 0, len(buf)
    while pos < end:
        msg = decode(buf, pos, check_crc=check_crc)
        yield msg
        pos += msg.store_size


# SEND_BATCH_MESSAGE bodies -------------------------------------------------------------------------------
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
