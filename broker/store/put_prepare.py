"""The put path's first half: a batch validated and turned into the records it will write (``Prepared``), with
no store state read and nothing written, so a refusal changes nothing and the locked half (``put.Appender``) only
places, encodes and writes.

``prepare_batch`` takes ``MessageDraft``s. ``prepare_raw`` is the SEND_BATCH_MESSAGE path: the batch arrives as
``(flag, body, properties bytes)`` entries decoded from the wire plus the fields every message shares
(``RawBatch``), so no draft, no property dict and no property text is built per message: the stored properties
are the client's bytes followed by the batch's own (``CLUSTER``), as RocketMQ's MessageExtBatchEncoder writes
them, and the tags code is read from those bytes the way the dispatcher reads it. DELAY is not supported there
(as in RocketMQ's batches): such batches go through ``prepare_batch``.

Delay rewrite (RocketMQ CommitLog.asyncPutMessage): ``DELAY=n > 0`` stores the message under
SCHEDULE_TOPIC_XXXX queue ``min(n, maxLevel) - 1`` with ``REAL_TOPIC`` / ``REAL_QID``; its consume-queue
tags code is the delivery time (store time + level delay), which the writer sets once it knows the store time.

Transaction PREPARED/ROLLBACK records (sys flag bits 2-3 = 0x4/0xC) get queue offset 0 and no consume-queue
unit, as in RocketMQ: ``E_DISPATCHED`` is False for them.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import NamedTuple

from broker.store.types import SCHEDULE_TOPIC, MessageDraft, PutResult, PutStatus, RawBatch
from remoting.headers import INT_MAX, INT_MIN, NumberError, parse_int
from remoting.message_codec import (
    BLANK_SIZE,
    MAX_PROPERTIES_LEN,
    MIN_RECORD_SIZE,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_WAIT_STORE_MSG_OK,
    host_bytes,
    java_string_hash,
    validate_topic,
)

_FIELDS = struct.Struct(">iiiqi").pack  # range check of the draft's numeric fields before anything is written

TX_MASK = 0xC
TX_NOT_DISPATCHED = (0x4, 0xC)


@functools.lru_cache(maxsize=65536)
def tags_hash(tags: str) -> int:
    return java_string_hash(tags)


@functools.lru_cache(maxsize=4096)
def _born_host(ip: str, port: int) -> bytes:
    return host_bytes(ip, port)


_TAGS_KEY = b"TAGS\x01"
_DELAY_KEY = b"DELAY\x01"


@functools.lru_cache(maxsize=65536)
def _raw_tags_hash(raw: bytes) -> int:
    text = raw.decode("utf-8", "replace")
    return java_string_hash(text) if text else 0


def raw_tags_code(props: bytes) -> int:
    """The tags code of stored properties bytes: the value of the first ``TAGS`` key, as the dispatcher reads it
    (``dispatch_scan``), so a master and its slave build the same consume-queue units."""
    at = props.find(_TAGS_KEY)
    while at > 0 and props[at - 1] != 2:  # "TAGS\x01" must start a key
        at = props.find(_TAGS_KEY, at + 1)
    if at < 0:
        return 0
    start = at + len(_TAGS_KEY)
    end = props.find(b"\x02", start)
    return _raw_tags_hash(props[start : end if end >= 0 else len(props)])


# One message of a batch. A plain tuple, not a NamedTuple: CPython builds a literal tuple in one step but a
# NamedTuple through a Python-level __new__, and unpacks and indexes a tuple subclass off its fast path (measured
# on the put path with 16- and 128-message batches of 1 KiB: +0.3 to 0.5 us per message, 10 to 15 %). Fields are
# read through the E_* indexes below, or by unpacking in the order they are listed:
#   E_TOPIC        str    the topic it is stored under (SCHEDULE_TOPIC_XXXX for a delayed message)
#   E_TOPIC_BYTES  bytes  the same, encoded as the record stores it
#   E_QUEUE        int    queue id (a delayed message: its delay level - 1)
#   E_BODY         bytes-like
#   E_FLAG         int    the message's flag
#   E_COMMON       tuple  (sys flag, born timestamp ms, born host bytes, reconsume times): shared by every message
#                         of a raw batch, built once per draft otherwise
#   E_PROPS        bytes  stored properties (k\x01v\x02 ...)
#   E_SIZE         int    the record's TOTALSIZE
#   E_CODE         int    consume-queue tags code (a delayed message's is set at write time: its delivery time)
#   E_LEVEL        int    delay level, 0 when not delayed
#   E_DISPATCHED   bool   gets a consume-queue unit (False for transaction PREPARED/ROLLBACK records)
Entry = tuple
(E_TOPIC, E_TOPIC_BYTES, E_QUEUE, E_BODY, E_FLAG, E_COMMON, E_PROPS, E_SIZE, E_CODE, E_LEVEL, E_DISPATCHED) = range(11)

SCHEDULE_TOPIC_BYTES = SCHEDULE_TOPIC.encode()
SCHEDULE_RECORD_BASE_SIZE = MIN_RECORD_SIZE + len(SCHEDULE_TOPIC_BYTES)  # a delayed record without body or props


class Prepared(NamedTuple):
    entries: list[Entry]
    total: int
    wait: bool
    single_queue: bool
    all_dispatched: bool  # no transaction PREPARED/ROLLBACK record in the batch


def illegal(remark: str, status: PutStatus = PutStatus.MESSAGE_ILLEGAL) -> PutResult:
    return PutResult(status, remark=remark)


_join_pair = "\x01".join
_valid_topics: set[str] = set()  # names validate_topic accepted (bounded)


def check_target(topic: str, queue_id: int) -> PutResult | None:
    """The refusal of a put to ``topic``/``queue_id`` (a negative queue id, a name validate_topic rejects), or
    None; an accepted name is remembered, so a steady stream of puts validates its topic once."""
    if queue_id < 0:
        return illegal(f"queue id {queue_id} is negative")
    if topic not in _valid_topics:
        problem = validate_topic(topic)
        if problem:
            return illegal(problem)
        if len(_valid_topics) > 100_000:
            _valid_topics.clear()
        _valid_topics.add(topic)
    return None


def prepare_batch(
    topic: str,
    queue_id: int,
    drafts: Sequence[MessageDraft],
    *,
    max_message_size: int,
    file_size: int,
    max_delay_level: int,
) -> Prepared | PutResult:
    """Validate a batch and precompute everything that does not depend on store state."""
    if not drafts:
        return illegal("the batch is empty; send at least one message")
    refused = check_target(topic, queue_id)
    if refused is not None:
        return refused
    topic_bytes = topic.encode()
    base_size = MIN_RECORD_SIZE + len(topic_bytes)
    entries: list[Entry] = []
    append = entries.append
    total = 0
    wait = False
    single = True
    all_dispatched = True
    for i, d in enumerate(drafts):
        body = d.body
        if type(body) is not bytes and not isinstance(body, bytes | bytearray | memoryview):
            return illegal(f"message {i}: the body must be bytes, got {type(body).__name__}")
        blen = len(body)
        if not blen or blen > max_message_size:
            if not blen:
                return illegal(f"message {i} of the batch has an empty body")
            return illegal(f"message {i} body is {blen} bytes, over maxMessageSize={max_message_size}")
        props = d.properties
        level = 0
        if props:
            if PROPERTY_DELAY_TIME_LEVEL in props:
                delayed = _delay_rewrite(i, topic, queue_id, d, props, max_delay_level)
                if isinstance(delayed, PutResult):
                    return delayed
                props, level = delayed
            n = len(props)
            try:
                text = "\x02".join(map(_join_pair, props.items())) + "\x02"
            except TypeError:
                return illegal(f"message {i}: property names and values must be strings")
            if text.count("\x01") != n or text.count("\x02") != n:
                return illegal(f"message {i}: a property name or value contains \\x01 or \\x02 (the separators)")
            raw = text.encode()
            if len(raw) > MAX_PROPERTIES_LEN:
                return illegal(
                    f"message {i}: properties are {len(raw)} bytes, over the limit of {MAX_PROPERTIES_LEN}",
                    PutStatus.PROPERTIES_SIZE_EXCEEDED,
                )
            if not wait and props.get(PROPERTY_WAIT_STORE_MSG_OK) != "false":
                wait = True
            tags = props.get(PROPERTY_TAGS)
            code = tags_hash(tags) if tags else 0
        else:
            raw = b""
            wait = True
            code = 0
        try:
            _FIELDS(d.flag, d.sys_flag, d.reconsume_times, d.born_timestamp, d.born_host[1])
        except (struct.error, TypeError, IndexError):
            return illegal(f"message {i}: flag, sysFlag, reconsumeTimes, bornTimestamp or born port is out of range")
        dispatched = (d.sys_flag & TX_MASK) not in TX_NOT_DISPATCHED
        if not dispatched:
            all_dispatched = False
        common = (d.sys_flag, d.born_timestamp, _born_host(*d.born_host), d.reconsume_times)
        if level:
            single = False
            size = SCHEDULE_RECORD_BASE_SIZE + blen + len(raw)
            entry = (SCHEDULE_TOPIC, SCHEDULE_TOPIC_BYTES, level - 1, body, d.flag, common, raw, size, code, level,
                     dispatched)
        else:
            size = base_size + blen + len(raw)
            entry = (topic, topic_bytes, queue_id, body, d.flag, common, raw, size, code, 0, dispatched)
        if size + BLANK_SIZE > file_size:
            return illegal(
                f"message {i} needs {size} bytes, more than a commitlog file of mappedFileSizeCommitLog={file_size}"
            )
        append(entry)
        total += size
    return Prepared(entries, total, wait, single, all_dispatched)


def prepare_raw(
    topic: str, queue_id: int, batch: RawBatch, *, max_message_size: int, file_size: int
) -> Prepared | PutResult:
    """``prepare_batch`` for a batch decoded from the wire: per message only its size, its stored properties (the
    client's bytes, then the batch's) and its tags code are computed; everything else is shared."""
    entries_in = batch.entries
    if not entries_in:
        return illegal("the batch is empty; send at least one message")
    refused = check_target(topic, queue_id)
    if refused is not None:
        return refused
    suffix = batch.suffix
    if suffix and suffix[-1] != 2:
        return illegal("the batch properties must end with \\x02 (encode_properties)")
    try:
        _FIELDS(0, batch.sys_flag, batch.reconsume_times, batch.born_timestamp, batch.born_host[1])
    except (struct.error, TypeError, IndexError):
        return illegal("sysFlag, reconsumeTimes, bornTimestamp or born port is out of range")
    topic_bytes = topic.encode()
    base_size = MIN_RECORD_SIZE + len(topic_bytes)
    common = (batch.sys_flag, batch.born_timestamp, _born_host(*batch.born_host), batch.reconsume_times)
    dispatched = (batch.sys_flag & TX_MASK) not in TX_NOT_DISPATCHED
    suffix_code = raw_tags_code(suffix) if suffix else 0
    sep_suffix = b"\x02" + suffix
    entries: list[Entry] = []
    append = entries.append
    total = 0
    limit = min(max_message_size, file_size)
    for i, (flag, body, own) in enumerate(entries_in):
        blen = len(body)
        if not blen or blen > limit:
            if not blen:
                return illegal(f"message {i} of the batch has an empty body")
            if blen > max_message_size:
                return illegal(f"message {i} body is {blen} bytes, over maxMessageSize={max_message_size}")
        if own:
            if _DELAY_KEY in own:
                return illegal(f"message {i}: DELAY is not supported in a batch; send delayed messages one by one")
            props = own + suffix if own[-1] == 2 else own + sep_suffix
            code = raw_tags_code(props)
            if len(props) > MAX_PROPERTIES_LEN:
                return illegal(
                    f"message {i}: properties are {len(props)} bytes, over the limit of {MAX_PROPERTIES_LEN}",
                    PutStatus.PROPERTIES_SIZE_EXCEEDED,
                )
        else:
            props, code = suffix, suffix_code
        size = base_size + blen + len(props)
        if size + BLANK_SIZE > file_size:
            return illegal(
                f"message {i} needs {size} bytes, more than a commitlog file of mappedFileSizeCommitLog={file_size}"
            )
        append((topic, topic_bytes, queue_id, body, flag, common, props, size, code, 0, dispatched))
        total += size
    return Prepared(entries, total, batch.wait, True, dispatched)


def _delay_rewrite(i: int, topic: str, queue_id: int, d: MessageDraft, props: dict, max_level: int):
    delay = props[PROPERTY_DELAY_TIME_LEVEL]
    try:
        level = parse_int(delay, INT_MIN, INT_MAX)  # int() would take "٣" (3) and " 3"
    except NumberError:
        return illegal(f"message {i}: DELAY={delay!r} is not a delay level number")
    if level <= 0 or d.sys_flag & TX_MASK:
        return props, 0
    level = min(level, max_level)
    props = dict(props)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return props, level
