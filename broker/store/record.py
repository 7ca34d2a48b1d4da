"""Commitlog record codec: RocketMQ's v1 message layout (spec §7.2). Pure: no I/O, no clocks.

Byte layout, big-endian, IPv4 born/store hosts (the only hosts this store writes):

    off  size  field
    0    4     TOTALSIZE (i32)      whole record, this field included
    4    4     MAGICCODE (i32)      0xDAA320A7 (as a signed i32: -626843481)
    8    4     BODYCRC (i32)        zlib.crc32(body) & 0x7FFFFFFF (RocketMQ UtilAll.crc32)
    12   4     QUEUEID (i32)
    16   4     FLAG (i32)
    20   8     QUEUEOFFSET (i64)
    28   8     PHYSICALOFFSET (i64) the record's own commitlog offset
    36   4     SYSFLAG (i32)
    40   8     BORNTIMESTAMP (i64)
    48   8     BORNHOST             4 address bytes + i32 port
    56   8     STORETIMESTAMP (i64)
    64   8     STOREHOST            4 address bytes + i32 port
    72   4     RECONSUMETIMES (i32)
    76   8     PREPARED TRANSACTION OFFSET (i64)
    84   4     BODYLENGTH (i32), then BODYLENGTH bytes
    ..   1     TOPICLENGTH (u8), then the UTF-8 topic
    ..   2     PROPERTIESLENGTH (i16), then ``k\\x01v\\x02k\\x01v\\x02...``

TOTALSIZE = 91 + body + topic + properties. A record whose TOTALSIZE disagrees with its own length fields
is corrupt, and so is one with an empty or NUL-containing topic or properties that do not end in ``\x02`` (the
body CRC covers only the body, so these shape checks are what catch a zeroed tail). The topic length is read unsigned so retry/DLQ topics up to 255 bytes survive a round trip
(RocketMQ 4.x wrote a signed byte and broke them).

End-of-file BLANK: ``[i32 remaining][i32 0xCBD43194]`` marks the rest of a commitlog file as unused.

``check_record`` is the one validator used by recovery, the dispatcher and the replicated-bytes tail parser:
it tells a VALID record from a BLANK end of file, an INCOMPLETE one (more bytes may still arrive, e.g. a record
split across two HA frames) and CORRUPT bytes. Nothing here keeps state, so everything is task- and
thread-safe.
"""

from __future__ import annotations

import enum
import functools
import re
import socket
import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from broker.store.types import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, StoredMessage
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

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Everything up to and including BODYLENGTH: 88 bytes.
HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")
_I32_PAIR = struct.Struct(">ii")
_I16 = struct.Struct(">h")
_U8 = struct.Struct(">B")
_HOST = struct.Struct(">4si")
_BODY_LEN_AT = 84
HEADER_SIZE = HEADER.size  # 88

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class RecordError(PyrmqError):
    """Bytes that are not a valid record; says where and why."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"bad commitlog record at byte {offset}: {reason}")
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


# hosts ---------------------------------------------------------------------------------------------------
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


# properties ----------------------------------------------------------------------------------------------
def encode_properties(props: dict[str, str]) -> bytes:
    if not props:
        return b""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode("utf-8")


def decode_properties(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    out: dict[str, str] = {}
    for item in bytes(data).decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        if item:
            key, _, value = item.partition(NAME_VALUE_SEPARATOR)
            out[key] = value
    return out


def property_value(data: bytes, key: str) -> str | None:
    """One property without building the dict (the dispatcher reads TAGS/DELAY this way)."""
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


# encoding ------------------------------------------------------------------------------------------------
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


# decoding ------------------------------------------------------------------------------------------------
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
    (
        _,
        _,
        crc,
        queue_id,
        _flag,
        queue_offset,
        phy_offset,
        sys_flag,
        _born_ts,
        _born_host,
        store_ts,
        _store_host,
        _reconsume,
        _prep,
        body_len,
    ) = HEADER.unpack_from(buf, pos)
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

    The same checks as ``check_record`` in one pass (this is the client's per-message decode).
    """
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
