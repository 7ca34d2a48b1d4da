"""Stored records (spec remoting.md §4.5), RocketMQ's v1 layout with IPv4 born/store hosts (the only hosts the store
writes): the commitlog holds these, and a pull answer's body is a concatenation of them. Every integer is
big-endian two's complement (Java ``ByteBuffer``)::

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

``check_record`` is the one validator used by recovery, the dispatcher and the replicated-bytes tail parser: it
tells a VALID record from a BLANK end of file, an INCOMPLETE one (more bytes may still arrive, e.g. a record split
across two HA frames) and CORRUPT bytes.

``decode_records`` is the one decoder, the consumer's per-message hot path and the broker's ``decode`` alike: it
accepts a record exactly when ``check_record`` would (same magic, length arithmetic, topic and property shape,
optional body CRC) but in one pass, unpacking the header once with ``HEADER``, decoding the topics and 8-byte hosts
a response repeats once per call through small dicts, and building ``StoredMessage`` positionally. Anything it does
not accept goes to ``check_record``, whose reason the ``RecordError`` carries, with the byte offset.
"""

from __future__ import annotations

import enum
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from remoting.message_codec.errors import RecordError
from remoting.message_codec.ids import offset_msg_id, parse_host
from remoting.message_codec.properties import (
    MAX_PROPERTIES_LEN,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    string_to_properties,
)

MESSAGE_MAGIC = -626843481  # 0xDAA320A7 as Java's int
BLANK_MAGIC = -875286124  # 0xCBD43194
MIN_RECORD_SIZE = 91  # empty body, topic and properties
BLANK_SIZE = 8
MAX_TOPIC_LEN = 127
MAX_RETRY_TOPIC_LEN = 255
# Largest record check_record accepts by default: RocketMQ's 4 MiB body limit plus the widest headers.
DEFAULT_MAX_RECORD_SIZE = 4 * 1024 * 1024 + MIN_RECORD_SIZE + MAX_RETRY_TOPIC_LEN + MAX_PROPERTIES_LEN

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

# Everything up to and including BODYLENGTH: 88 bytes.
HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")
HEADER_SIZE = HEADER.size  # 88
_I32_PAIR = struct.Struct(">ii")
_I16 = struct.Struct(">h")

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


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


# topic names ----------------------------------------------------------------------------------------------
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


_unpack = HEADER.unpack_from
_crc32 = zlib.crc32
_properties = string_to_properties


def decode_records(buf, *, check_crc: bool = False, start: int = 0, stop: int | None = None) -> list[StoredMessage]:
    """The records of ``buf`` from byte ``start`` on, in order, as long as the next one starts before ``stop`` (the
    end of ``buf`` by default: a whole pull response). ``RecordError`` on anything else, a torn tail included.
    Any buffer type (a copy is decoded when it is not ``bytes``)."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    out: list[StoredMessage] = []
    add = out.append
    topics: dict[bytes, str] = {}
    hosts: dict[bytes, tuple[str, int]] = {}
    msg = StoredMessage
    pos, end = start, len(buf)
    if stop is None:
        stop = end
    while pos < stop:
        if end - pos >= HEADER_SIZE + 3:
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
                born_raw,
                store_ts,
                store_raw,
                reconsume,
                prep,
                body_len,
            ) = _unpack(buf, pos)
            rec_end = pos + total
            body_at = pos + HEADER_SIZE
            p = body_at + body_len
            if (
                magic == MESSAGE_MAGIC
                and MIN_RECORD_SIZE <= total
                and rec_end <= end
                and 0 <= body_len
                and HEADER_SIZE + body_len + 3 <= total
            ):
                topic_len = buf[p]
                props_at = p + 1 + topic_len
                if props_at + 2 <= rec_end:
                    props_len = (buf[props_at] << 8) | buf[props_at + 1]  # an i16: >= 0x8000 is negative
                    if props_len < 0x8000 and MIN_RECORD_SIZE + topic_len + body_len + props_len == total:
                        topic_raw = buf[p + 1 : props_at]
                        topic = topics.get(topic_raw)
                        if topic is None and topic_raw and 0 not in topic_raw:
                            try:
                                topic = topics[topic_raw] = topic_raw.decode("utf-8")
                            except UnicodeDecodeError:
                                topic = None
                        props = buf[props_at + 2 : rec_end]
                        body = buf[body_at:p]
                        if (
                            topic is not None
                            and (not props or (props[-1] == 2 and 1 in props))
                            and (not check_crc or _crc32(body) & 0x7FFFFFFF == crc)
                        ):
                            born = hosts.get(born_raw)
                            if born is None:
                                born = hosts[born_raw] = parse_host(born_raw)
                            stored = hosts.get(store_raw)
                            if stored is None:
                                stored = hosts[store_raw] = parse_host(store_raw)
                            add(
                                msg(
                                    topic,
                                    queue_id,
                                    queue_offset,
                                    phy_offset,
                                    total,
                                    body,
                                    _properties(props.decode("utf-8", "replace")) if props else {},
                                    flag,
                                    sys_flag,
                                    born_ts,
                                    born,
                                    store_ts,
                                    stored,
                                    reconsume,
                                    crc,
                                    prep,
                                )
                            )
                            pos = rec_end
                            continue
        # Not accepted by the fast checks: the validator says why.
        result = check_record(buf, pos, check_crc=check_crc)
        raise RecordError(pos, result.reason or result.status.value.lower())
    return out


def decode(buf, offset: int = 0, *, check_crc: bool = False) -> StoredMessage:
    """One record at ``offset`` as a StoredMessage; RecordError says where and why when it is not one."""
    return decode_records(buf, check_crc=check_crc, start=offset, stop=offset + 1)[0]


def iter_records(buf, *, check_crc: bool = False) -> Iterator[StoredMessage]:
    """Decode concatenated records (a pull response) one at a time, so a RecordError (a torn tail included) comes
    after the records before it."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    pos, end = 0, len(buf)
    while pos < end:
        msg = decode(buf, pos, check_crc=check_crc)
        yield msg
        pos += msg.store_size
