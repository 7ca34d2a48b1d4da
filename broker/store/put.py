"""The put path, in two halves: ``prepare_batch`` (validation, no store state, nothing written on a refusal) and
``append_batch`` (under the put lock: queue offsets, placement in commitlog files, one encode into one
bytearray, one pwrite per file touched, one consume-queue write per queue). ``append_simple`` is the common case
(one queue, everything fits the current files) with no await at all, so the facade runs it without the lock.

Placement (RocketMQ's rule for batches): a batch goes to the current file when ``total + 8 <= remaining``;
else, if it fits an empty file, the current file is closed with a BLANK record and the batch goes to the next
file; else (a batch larger than a file) it is split into chunks of whole records, each chunk filling a file up
to 8 bytes before its end. Every file a batch needs is created *before* the first byte is written, so a
failure to create one (ENOSPC) leaves the store untouched.

Delay rewrite (RocketMQ CommitLog.asyncPutMessage): ``DELAY=n > 0`` stores the message under
SCHEDULE_TOPIC_XXXX queue ``min(n, maxLevel) - 1`` with ``REAL_TOPIC`` / ``REAL_QID``; its consume-queue
tags code is the delivery time (store time + level delay).

``prepare_raw`` is the SEND_BATCH_MESSAGE path: the batch arrives as ``(flag, body, properties bytes)`` entries
decoded from the wire plus the fields every message shares (``RawBatch``), so no draft, no property dict and no
property text is built per message: the stored properties are the client's bytes followed by the batch's own
(``CLUSTER``), as RocketMQ's MessageExtBatchEncoder writes them, and the tags code is read from those bytes the
way the dispatcher reads it. DELAY is not supported there (as in RocketMQ's batches): such batches go through
``prepare_batch``.

Transaction PREPARED/ROLLBACK records (sys flag bits 2-3 = 0x4/0xC) get queue offset 0 and no consume-queue
unit, as in RocketMQ.
"""

from __future__ import annotations

import errno
import functools
import logging
import struct
import time
import zlib
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from broker.store.cleanup import DiskMonitor
from broker.store.commitlog import CommitLog
from broker.store.consume_queue import UNIT, UNIT_SIZE
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.dispatch_state import DispatchState
from broker.store.flush import GroupCommitService
from broker.store.types import SCHEDULE_TOPIC, MessageDraft, PutResult, PutStatus, RawBatch
from remoting.headers import INT_MAX, INT_MIN, NumberError, parse_int
from remoting.message_codec import (
    BLANK_SIZE,
    HEADER,
    MAX_PROPERTIES_LEN,
    MESSAGE_MAGIC,
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

log = logging.getLogger(__name__)

_crc32 = zlib.crc32
_pack_header = HEADER.pack
_pack_unit = UNIT.pack
_PROPS_LEN = struct.Struct(">h").pack
_FIELDS = struct.Struct(">iiiqi").pack  # range check of the draft's numeric fields before anything is written

TX_MASK = 0xC
TX_NOT_DISPATCHED = (0x4, 0xC)


# waiter(next_offset) or waiter(next_offset, deadline): (status, remark) once replicated, or at slaveTimeout or the
# sender's deadline (event-loop time), whichever comes first
ReplicaWaiter = Callable[..., Awaitable[tuple[PutStatus, str]]]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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


class Placement(NamedTuple):
    new_files: int  # files to create before writing
    chunks: list[tuple[int, int, bool]]  # (first entry, end entry, roll before this chunk)


def plan(entries: list[Entry], total: int, remaining: int, file_size: int) -> Placement:
    if total + BLANK_SIZE <= remaining:
        return Placement(0, [(0, len(entries), False)])
    if total + BLANK_SIZE <= file_size:
        return Placement(1, [(0, len(entries), True)])
    chunks = []
    first, used, roll, rolls = 0, 0, False, 0
    room = remaining
    for i, e in enumerate(entries):
        size = e[E_SIZE]
        if used + size + BLANK_SIZE > room:
            if i > first:
                chunks.append((first, i, roll))
            first, used, roll, room = i, 0, True, file_size
            rolls += 1
        used += size
    chunks.append((first, len(entries), roll))
    return Placement(rolls, chunks)


def encode_chunk(
    buf: bytearray,
    entries: list[Entry],
    begin: int,
    end: int,
    base_offset: int,
    queue_offsets: list[int],
    store_ts: int,
    store_host: bytes,
    phys: list[int],
    units: bytearray | None,
) -> None:
    """Append records ``entries[begin:end]`` to ``buf`` (first one at commitlog offset ``base_offset``).

    With ``units`` (a single-queue batch without transaction records) the consume-queue units are built in the
    same pass; otherwise ``cq_units`` builds them afterwards.
    """
    pack_header, pack_unit, crc32, plen = _pack_header, _pack_unit, _crc32, _PROPS_LEN
    for i in range(begin, end):
        _, tb, qid, body, flag, (sys_flag, born_ts, born, reconsume), props, size, code, _, _ = entries[i]
        phy = base_offset + len(buf)
        phys.append(phy)
        buf += pack_header(
            size,
            MESSAGE_MAGIC,
            crc32(body) & 0x7FFFFFFF,  # RocketMQ's UtilAll.crc32 keeps 31 bits
            qid,
            flag,
            queue_offsets[i],
            phy,
            sys_flag,
            born_ts,
            born,
            store_ts,
            store_host,
            reconsume,
            0,  # prepared transaction offset
            len(body),
        )
        buf += body
        buf.append(len(tb))
        buf += tb
        buf += plen(len(props))
        buf += props
        if units is not None:
            units += pack_unit(phy, size, code)


def cq_units(
    entries: list[Entry],
    queue_offsets: list[int],
    phys: list[int],
    store_ts: int,
    delay_ms: list[int],
) -> dict[tuple[str, int], tuple[int, bytearray, int]]:
    """Consume-queue units grouped per queue: key -> (first queue offset, units, max physical end)."""
    out: dict[tuple[str, int], tuple[int, bytearray, int]] = {}
    for i, (topic, _, qid, _, _, _, _, size, code, level, dispatched) in enumerate(entries):
        if not dispatched:
            continue
        if level:
            code = store_ts + delay_ms[level - 1]
        key = (topic, qid)
        item = out.get(key)
        if item is None:
            first, units = queue_offsets[i], bytearray()
        else:
            first, units, _ = item
        units += _pack_unit(phys[i], size, code)
        out[key] = (first, units, phys[i] + size)
    return out


class Appender:
    """The writing half of the put path, with the collaborators it writes to: the commitlog, the consume-queue
    table, the dispatch state (advanced and its listeners told in the same step, so a master's queues never lag
    its commitlog) and the store's put counters (``stats``, shared with the facade)."""

    __slots__ = ("commitlog", "delay_levels_ms", "queues", "state", "stats", "store_host")

    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueStore,
        state: DispatchState,
        *,
        store_host: bytes,
        delay_levels_ms: list[int],
        stats: dict[str, int],
    ) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.state = state
        self.store_host = store_host
        self.delay_levels_ms = delay_levels_ms
        self.stats = stats

    def _finish(self, prepared: Prepared, units_keys, qoff0: int, store_ts: int, phys: list[int]) -> PutResult:
        next_offset = self.commitlog.max_offset
        state = self.state
        state.dispatched = next_offset
        state.last_put_ts = store_ts
        stats = self.stats
        stats["putMessageTimesTotal"] += len(prepared.entries)
        stats["putMessageSizeTotal"] += prepared.total
        if state.dispatch_listeners:
            for topic, queue_id in units_keys:
                state.notify_dispatch(topic, queue_id)
        if state.append_listeners:
            state.notify_append(next_offset)
        wrote_offset = phys[0]
        return PutResult(
            PutStatus.PUT_OK,
            wrote_offset=wrote_offset,
            wrote_bytes=next_offset - wrote_offset,
            queue_offset=qoff0,
            msg_count=len(prepared.entries),
            store_timestamp=store_ts,
            physical_offsets=phys,
        )

    def append_simple(self, prepared: Prepared) -> PutResult | None:
        """The common put, with no await at all: one queue, no transaction records, fits the current commitlog
        and consume-queue files. None when the batch needs the general path."""
        last = self.commitlog.files.last
        if last is None or prepared.total + BLANK_SIZE > last.remaining:
            return None
        entries = prepared.entries
        n = len(entries)
        topic, queue_id = entries[0][E_TOPIC], entries[0][E_QUEUE]
        cq = self.queues.find_or_create(topic, queue_id)
        cq_last = cq.files.last
        base = cq.max_offset
        if cq_last is None or cq_last.room < n * UNIT_SIZE or cq_last.write_offset != base * UNIT_SIZE:
            return None
        store_ts = now_ms()
        phys: list[int] = []
        units = bytearray()
        buf = bytearray()
        qoffs = range(base, base + n)
        encode_chunk(buf, entries, 0, n, last.write_offset, qoffs, store_ts, self.store_host, phys, units)
        last.append(buf)
        cq.write(base, units, phys[-1] + entries[-1][E_SIZE])
        return self._finish(prepared, ((topic, queue_id),), base, store_ts, phys)

    async def append_batch(self, prepared: Prepared) -> PutResult:
        """The locked half of a put (the caller holds the put lock): offsets, files, one encode, one write each."""
        if prepared.single_queue and prepared.all_dispatched:
            done = self.append_simple(prepared)
            if done is not None:
                return done
        cl = self.commitlog
        queues = self.queues
        entries = prepared.entries
        last = cl.files.last
        remaining = last.remaining if last is not None else 0
        placement = plan(entries, prepared.total, remaining, cl.file_size)
        # Queue offsets: consume queues are written in this same critical section, so their max is the counter.
        single_units: bytearray | None = None
        spans: dict[tuple[str, int], list[int]] = {}  # (topic, queue id) -> [first queue offset, count]
        if prepared.single_queue:
            key = (entries[0][E_TOPIC], entries[0][E_QUEUE])
            base = queues.find_or_create(*key).max_offset
            if all(e[E_DISPATCHED] for e in entries):
                qoffs = list(range(base, base + len(entries)))
                single_units = bytearray()
            else:
                qoffs, n = [], base
                for e in entries:
                    qoffs.append(n if e[E_DISPATCHED] else 0)
                    n += 1 if e[E_DISPATCHED] else 0
            spans[key] = [base, qoffs[-1] - base + 1 if single_units is not None else len(entries)]
        else:
            qoffs = []
            for e in entries:
                if not e[E_DISPATCHED]:
                    qoffs.append(0)
                    continue
                key = (e[E_TOPIC], e[E_QUEUE])
                span = spans.get(key)
                if span is None:
                    span = spans[key] = [queues.find_or_create(*key).max_offset, 0]
                first, count = span
                qoffs.append(first + count)
                span[1] = count + 1
        # Every file this batch needs exists before the first byte is written: a failure changes nothing.
        for (topic, qid), (first, count) in spans.items():
            cq = queues.find_or_create(topic, qid)
            last = cq.files.last
            if last is not None and last.room >= count * UNIT_SIZE and last.write_offset == first * UNIT_SIZE:
                continue
            if cq.needs_prepare(first, count):
                await cq.prepare(first, count, queues.run_disk)
        new_files = await cl.acquire_next_files(placement.new_files) if placement.new_files else []
        store_ts = now_ms()
        phys: list[int] = []
        host = self.store_host
        nf = iter(new_files)
        left = len(new_files)
        for begin, end, roll in placement.chunks:
            if roll:
                left -= 1
                mf = cl.roll(next(nf), prefetch=left == 0)
            else:
                mf = cl.files.last
            buf = bytearray()
            encode_chunk(buf, entries, begin, end, mf.write_offset, qoffs, store_ts, host, phys, single_units)
            mf.append(buf)
        if single_units is not None:
            last = entries[-1]
            units = {(last[E_TOPIC], last[E_QUEUE]): (qoffs[0], single_units, phys[-1] + last[E_SIZE])}
        else:
            units = cq_units(entries, qoffs, phys, store_ts, self.delay_levels_ms)
        for (topic, qid), (first, data, end_phy) in units.items():
            queues.find_or_create(topic, qid).write(first, data, end_phy)
        return self._finish(prepared, units, qoffs[0], store_ts, phys)


async def wait_stored(
    result: PutResult, group_commit: GroupCommitService | None, waiter: ReplicaWaiter | None, deadline: float | None
) -> None:
    """The put's second half, outside the put lock: wait for the group commit (SYNC_FLUSH) and the replica
    (SYNC_MASTER) at once, as RocketMQ combines their futures; a status other than PUT_OK replaces ``result``'s,
    the replica's last, so it wins."""
    end = result.next_offset
    replicated = None
    if waiter is not None:
        replicated = waiter(end) if deadline is None else waiter(end, deadline)
    if group_commit is not None and replicated is not None:
        outcomes = await asyncio.gather(group_commit.wait_flushed(end, deadline), replicated)
    elif group_commit is not None:
        outcomes = [await group_commit.wait_flushed(end, deadline)]
    elif replicated is not None:
        outcomes = [await replicated]
    else:
        return
    for status, remark in outcomes:
        if status is not PutStatus.PUT_OK:
            result.status, result.remark = status, remark


def write_failed(exc: OSError, disk: DiskMonitor) -> PutResult:
    """The answer to a put whose file creation or write failed: no space marks the store full (puts are refused
    until space returns); anything else is logged and reported."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        disk.mark_no_space(str(exc))
        return PutResult(
            PutStatus.CREATE_MAPPED_FILE_FAILED,
            remark=f"no space for the next commitlog file: {exc}; {disk.remark()}",
        )
    log.exception("commitlog write failed")
    return PutResult(PutStatus.UNKNOWN_ERROR, remark=f"commitlog write failed: {exc}")
