"""The read path: RocketMQ DefaultMessageStore.getMessage over consume queue + commitlog.

Statuses and ``next_begin_offset`` follow 4.9.8 exactly (spec §5.1):
- no queue -> NO_MATCHED_LOGIC_QUEUE, next = correction(offset, 0); empty queue -> NO_MESSAGE_IN_QUEUE, same;
- offset < min -> OFFSET_TOO_SMALL, next = correction(offset, min);
- offset == max -> OFFSET_OVERFLOW_ONE, next = offset; offset > max -> OFFSET_OVERFLOW_BADLY, next =
  correction(offset, min if min == 0 else max);
- inside [min, max): units are scanned; each message is "in disk" when the commitlog head is more than
  ``accessMessageInMemoryMaxRatio`` % of physical RAM ahead of it, which picks the batch caps (in memory 256 KiB
  / 32 messages, in disk 64 KiB / 8); a batch always carries at least one message. The TagFilter checks the
  unit's tags code, then the record's TAGS. next = offset + units examined. The records found are returned as
  memoryviews of the commitlog mapping, one per contiguous run, never copied (``GetResult.buffers``); without a
  tag filter no Python code runs per message (``_read_unfiltered``). A ``record_filter`` (a SQL92 subscription,
  RocketMQ's ExpressionMessageFilter#isMatchedByCommitLog) is asked ``match_record(mapping, start, end)`` for each
  record after the tag check; it reads the record in place, and records it refuses are skipped like tag misses
  (next still advances past them). A unit whose record is gone
  (MESSAGE_WAS_REMOVING) skips to the next commitlog file. ``suggest_pulling_from_slave`` is set when the
  head is that far ahead of the last unit examined. The queue's file missing -> OFFSET_FOUND_NULL.

``visible_below`` (controller mode, consumer reads): units whose record starts at or beyond it are not served; the
queue answers as if it ended at the first of them (OFFSET_OVERFLOW_ONE there, ``max_offset`` cut to it when the
batch met it). One comparison per batch when the whole batch is visible.

``correction(old, new)`` is ``new`` except on a SLAVE without ``offsetCheckInSlave``, where it is ``old``.
Pure reads of memory-mapped files: no awaits, safe on the event loop.
"""

from __future__ import annotations

import functools
import os
import struct
from bisect import bisect_right
from itertools import accumulate, compress
from operator import add, ne
from typing import Protocol

from broker.config import BrokerRole, MessageStoreConfig
from broker.store.commitlog import CommitLog
from broker.store.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.types import GetResult, GetStatus
from broker.store.visibility import visible_units
from remoting.message_codec import (
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PROPERTY_TAGS,
    RecordError,
    StoredMessage,
    TagFilter,
    decode,
    property_value,
)

_STORE_TS_AT = 56  # STORETIMESTAMP offset in a record
_I32 = struct.Struct(">i").unpack_from
_I16 = struct.Struct(">h").unpack_from
_PAIR = struct.Struct(">ii").unpack_from  # total size, magic code
_TAGS_NEEDLE = PROPERTY_TAGS.encode() + b"\x01"
_TAGS_SEP_NEEDLE = b"\x02" + _TAGS_NEEDLE
_FALLBACK_MEMORY = 24 * 1024**3


class RecordFilter(Protocol):
    """A filter over a stored record read in place (``buf[start:end]``), e.g. a compiled SQL92 subscription."""

    def match_record(self, buf, start: int, end: int) -> bool: ...


def total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return _FALLBACK_MEMORY


TOTAL_PHYSICAL_MEMORY = total_physical_memory()


def get_message(
    cfg: MessageStoreConfig,
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    max_total_bytes: int,
    tag_filter: TagFilter | None,
    record_filter: RecordFilter | None = None,
    visible_below: int | None = None,
) -> GetResult:
    correct = cfg.broker_role is not BrokerRole.SLAVE or cfg.offset_check_in_slave

    def correction(old: int, new: int) -> int:
        return new if correct else old

    max_offset_py = commitlog.max_offset
    cq = queues.find(topic, queue_id)
    if cq is None:
        return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=correction(offset, 0))
    min_offset, max_offset = cq.min_offset, cq.max_offset
    if max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, correction(offset, 0), min_offset, max_offset)
    if offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, correction(offset, min_offset), min_offset, max_offset)
    if offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, correction(offset, offset), min_offset, max_offset)
    if offset > max_offset:
        nxt = correction(offset, min_offset if min_offset == 0 else max_offset)
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, nxt, min_offset, max_offset)

    max_filter_units = max(16000, max_msg_nums * UNIT_SIZE) // UNIT_SIZE  # RocketMQ counts this in bytes
    units = cq.read_units(offset, max_filter_units)
    if units is None:
        per_file = cq.file_size // UNIT_SIZE
        nxt = correction(offset, offset + per_file - offset % per_file)
        return GetResult(GetStatus.OFFSET_FOUND_NULL, nxt, min_offset, max_offset)
    if visible_below is not None:  # controller mode: the queue ends, for consumers, at the confirm offset
        n = visible_units(units, visible_below)
        if not n:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, correction(offset, offset), min_offset, offset)
        if n * UNIT_SIZE < len(units):
            units = units[: n * UNIT_SIZE]
            max_offset = offset + n

    memory = TOTAL_PHYSICAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100
    read = _Read(cfg, commitlog, offset, min_offset, max_offset, max_msg_nums, max_total_bytes, max_offset_py - memory)
    filt = tag_filter if tag_filter is not None and not tag_filter.match_all else None
    if filt is None and record_filter is None:
        found = _read_unfiltered(read, units)
        if found is not None:
            return found
    return _read_scanning(read, units, filt, record_filter)


class _Read:
    """The parameters of one read, shared by the two readers."""

    __slots__ = (
        "cap",
        "cfg",
        "commitlog",
        "disk_below",
        "max_msg_nums",
        "max_offset",
        "max_offset_py",
        "min_offset",
        "offset",
    )

    def __init__(self, cfg, commitlog, offset, min_offset, max_offset, max_msg_nums, max_total_bytes, disk_below):
        self.cfg = cfg
        self.commitlog = commitlog
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.max_msg_nums = max_msg_nums
        self.cap = max_total_bytes if max_total_bytes > 0 else -1
        self.disk_below = disk_below  # a unit is "in disk" when its physical offset is below this
        self.max_offset_py = commitlog.max_offset


@functools.lru_cache(maxsize=64)
def _units_struct(count: int) -> struct.Struct:
    return struct.Struct(">" + "qiq" * count)


def _read_unfiltered(r: _Read, units: bytes) -> GetResult | None:
    """The common read, with no Python work per message: the units are unpacked in one call, the batch caps are
    found by bisecting the running total of sizes, and the records are sliced from the mapping once per
    contiguous run (a single-queue topic's records are one run). None when the general scan must decide (units
    on both sides of the in-memory boundary, or a record that is not readable)."""
    cfg = r.cfg
    n_units = len(units) // UNIT_SIZE
    if not n_units:
        return None
    first_offset = UNIT.unpack_from(units, 0)[0]
    if first_offset >= r.disk_below:
        count_cap, bytes_cap = cfg.max_transfer_count_on_message_in_memory, cfg.max_transfer_bytes_on_message_in_memory
    else:
        count_cap, bytes_cap = cfg.max_transfer_count_on_message_in_disk, cfg.max_transfer_bytes_on_message_in_disk
    limit = min(r.max_msg_nums, count_cap)
    k = min(n_units, max(1, limit) + 1)  # the unit after the last one taken decides max_phy_pulling
    values = _units_struct(k).unpack_from(units)
    offs = values[0::3]
    sizes = values[1::3]
    lo_off, hi_off = min(offs), max(offs)
    if (lo_off >= r.disk_below) != (hi_off >= r.disk_below):
        return None  # mixed in-memory and in-disk caps: the scan applies them unit by unit
    acc = list(accumulate(sizes))
    byte_limit = bytes_cap if r.cap < 0 else min(bytes_cap, r.cap)
    m = min(n_units, k, max(1, min(limit, bisect_right(acc, byte_limit))))
    ends = list(map(add, offs[:m], sizes[:m]))
    breaks = list(compress(range(1, m), map(ne, offs[1:m], ends)))
    buffers: list[memoryview] = []
    find_file = r.commitlog.files.find
    lo = hi = -1
    mf = None
    run_start = 0
    for run_end in (*breaks, m):
        start, end = offs[run_start], ends[run_end - 1]
        if not (lo <= start and end <= hi):
            mf = find_file(start)
            if mf is None:
                return None
            lo = mf.start_offset
            hi = lo + mf.wrote_position
            if end > hi:
                return None
        buffers.append(mf.view(start - lo, end - lo))
        run_start = run_end
    max_phy_pulling = offs[m] if m < len(offs) else offs[m - 1]
    return GetResult(
        GetStatus.FOUND,
        next_begin_offset=r.offset + m,
        min_offset=r.min_offset,
        max_offset=r.max_offset,
        buffers=buffers,
        suggest_pulling_from_slave=(r.max_offset_py - max_phy_pulling) > (r.max_offset_py - r.disk_below),
        total_bytes=acc[m - 1],
        message_count=m,
    )


def _read_scanning(
    r: _Read, units: bytes, filt: TagFilter | None, record_filter: RecordFilter | None = None
) -> GetResult:
    """Unit by unit: tag filters, the in-memory/in-disk caps per unit, unreadable records (MESSAGE_WAS_REMOVING
    skips to the next commitlog file). Matching records that touch are still sent as one run."""
    cfg = r.cfg
    file_size = r.commitlog.file_size
    find_file = r.commitlog.files.find
    codes = filt.codes if filt is not None else None
    status = GetStatus.NO_MATCHED_MESSAGE
    buffers: list[memoryview] = []
    count = 0
    total = 0
    next_phy_file_start = -1
    max_phy_pulling = 0
    disk_below = r.disk_below
    cap = r.cap
    max_msg_nums = r.max_msg_nums
    disk_bytes, disk_count = cfg.max_transfer_bytes_on_message_in_disk, cfg.max_transfer_count_on_message_in_disk
    mem_bytes, mem_count = cfg.max_transfer_bytes_on_message_in_memory, cfg.max_transfer_count_on_message_in_memory
    # the commitlog file of the last record read: [lo, hi) is its readable range, mf the file. The current run
    # of touching records is [run_start, run_end) of that file.
    lo = hi = 0
    mf = None
    mm = None
    run_start = run_end = -1
    n_units = len(units) // UNIT_SIZE
    i = 0
    for i, (offset_py, size_py, tags_code) in enumerate(UNIT.iter_unpack(units[: n_units * UNIT_SIZE])):
        max_phy_pulling = offset_py
        if next_phy_file_start >= 0 and offset_py < next_phy_file_start:
            continue
        if count:
            t = total + size_py
            if count >= max_msg_nums or (cap >= 0 and t > cap):
                break
            if offset_py < disk_below:
                if t > disk_bytes or count >= disk_count:
                    break
            elif t > mem_bytes or count >= mem_count:
                break
        if codes is not None and tags_code not in codes:
            continue
        end_py = offset_py + size_py
        if not (lo <= offset_py < hi and end_py <= hi):
            if run_start >= 0:
                buffers.append(mf.view(run_start - lo, run_end - lo))
                run_start = -1
            mf = find_file(offset_py)
            if mf is not None:
                lo = mf.start_offset
                hi = lo + mf.wrote_position
                mm = mf.mapping
            if mf is None or end_py > hi:
                if not count:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = offset_py + file_size - offset_py % file_size
                lo = hi = 0
                continue
        if filt is not None and not filt.match_tags(_record_tags(mm[offset_py - lo : end_py - lo]) or ""):
            continue
        if record_filter is not None and not record_filter.match_record(mm, offset_py - lo, end_py - lo):
            continue
        if offset_py != run_end or run_start < 0:
            if run_start >= 0:
                buffers.append(mf.view(run_start - lo, run_end - lo))
            run_start = offset_py
        run_end = end_py
        count += 1
        total += size_py
        next_phy_file_start = -1
    else:
        i = n_units
    if run_start >= 0:
        buffers.append(mf.view(run_start - lo, run_end - lo))
    if count:
        status = GetStatus.FOUND
    suggest = (r.max_offset_py - max_phy_pulling) > (r.max_offset_py - disk_below)
    return GetResult(
        status,
        next_begin_offset=r.offset + i,
        min_offset=r.min_offset,
        max_offset=r.max_offset,
        buffers=buffers,
        suggest_pulling_from_slave=suggest,
        total_bytes=total,
        message_count=count,
    )


def read_record(commitlog: CommitLog, phy_offset: int) -> bytes | None:
    """The raw record at ``phy_offset`` (None when there is none or it is not complete)."""
    found = commitlog.view_at(phy_offset)
    if found is None:
        return None
    mf, pos = found
    if pos + 8 > mf.wrote_position:
        return None
    size = int.from_bytes(mf.buffer[pos : pos + 4], "big", signed=True)
    if size < MIN_RECORD_SIZE or pos + size > mf.wrote_position:
        return None
    return mf.read(pos, size)


def unit_points_at(queues: ConsumeQueueStore, topic: str, queue_id: int, queue_offset: int, phy_offset: int,
                   size: int) -> bool:
    """Whether the consume queue (``topic``, ``queue_id``) holds, at ``queue_offset``, the unit of exactly the record
    at ``phy_offset`` of ``size`` bytes: the store's own proof that a record starts there (every record below the
    dispatched offset has its unit; bytes shaped like a record inside a body have none)."""
    cq = queues.find(topic, queue_id)
    if cq is None or not cq.min_offset <= queue_offset < cq.max_offset:
        return False
    unit = cq.unit(queue_offset)
    return unit is not None and unit[0] == phy_offset and unit[1] == size


def walk_reaches(commitlog: CommitLog, start: int, phy_offset: int, max_records: int) -> bool | None:
    """Whether following the records' size fields from ``start`` (a record start: a file start or the dispatched
    offset) lands on ``phy_offset``; None when ``max_records`` steps did not get there (too far to decide
    cheaply). Only ``phy_offset``'s own file is walked: a file's first record starts at its first byte."""
    mf = commitlog.files.find(phy_offset)
    if mf is None:
        return False
    base = mf.start_offset
    pos, end, written = max(start, base) - base, phy_offset - base, mf.wrote_position
    buf = mf.buffer
    for _ in range(max_records):
        if pos >= end:
            return pos == end
        if pos + 8 > written:
            return False
        size, magic = _PAIR(buf, pos)
        if magic != MESSAGE_MAGIC or size < MIN_RECORD_SIZE:
            return False
        pos += size
    return pos == end if pos >= end else None


def read_message(commitlog: CommitLog, phy_offset: int) -> StoredMessage | None:
    """The decoded message at ``phy_offset`` (None when there is none or it does not decode)."""
    raw = read_record(commitlog, phy_offset)
    if raw is None:
        return None
    try:
        return decode(raw)
    except RecordError:
        return None


def store_time_of(commitlog: CommitLog, phy_offset: int) -> int:
    """STORETIMESTAMP of the record at ``phy_offset``, -1 when unreadable."""
    found = commitlog.view_at(phy_offset)
    if found is None:
        return -1
    mf, pos = found
    if pos + _STORE_TS_AT + 8 > mf.wrote_position:
        return -1
    return int.from_bytes(mf.buffer[pos + _STORE_TS_AT : pos + _STORE_TS_AT + 8], "big", signed=True)


def store_timestamp_at(commitlog: CommitLog, cq: ConsumeQueue | None, queue_offset: int) -> int:
    """STORETIMESTAMP of the message at ``queue_offset`` of ``cq``; 0 when there is none or it is unreadable."""
    if cq is None or not cq.min_offset <= queue_offset < cq.max_offset:
        return 0
    unit = cq.unit(queue_offset)
    return 0 if unit is None else max(store_time_of(commitlog, unit[0]), 0)


def offset_by_time(commitlog: CommitLog, cq: ConsumeQueue | None, timestamp_ms: int) -> int:
    """The first queue offset stored at or after ``timestamp_ms`` (RocketMQ getOffsetInQueueByTime); 0 without
    a queue."""
    if cq is None:
        return 0
    return cq.offset_by_time(timestamp_ms, lambda phy_offset, _size: store_time_of(commitlog, phy_offset))


def _record_tags(raw: bytes) -> str | None:
    """``property_value(<the record's properties>, "TAGS")``, found in place (no copy of the properties)."""
    n = len(raw)
    if n < 88:
        return _record_tags_sliced(raw)
    p = 88 + _I32(raw, 84)[0]
    if p < 0 or p >= n:
        return _record_tags_sliced(raw)
    props_at = p + 1 + raw[p]
    ps = props_at + 2
    if ps > n:
        return _record_tags_sliced(raw)
    pe = ps + _I16(raw, props_at)[0]
    if pe <= ps:  # property_value of an empty slice
        return None
    pe = min(pe, n)
    if raw.startswith(_TAGS_NEEDLE, ps, pe):
        start = ps + len(_TAGS_NEEDLE)
    else:
        idx = raw.find(_TAGS_SEP_NEEDLE, ps, pe)
        if idx < 0:
            return None
        start = idx + len(_TAGS_SEP_NEEDLE)
    end = raw.find(b"\x02", start, pe)
    return raw[start : end if end >= 0 else pe].decode("utf-8", "replace")


def _record_tags_sliced(raw: bytes) -> str | None:
    """The slicing version, for records too short or too corrupt for the in-place search."""
    body_len = int.from_bytes(raw[84:88], "big", signed=True)
    p = 88 + body_len
    topic_len = raw[p]
    props_at = p + 1 + topic_len
    props_len = int.from_bytes(raw[props_at : props_at + 2], "big", signed=True)
    return property_value(raw[props_at + 2 : props_at + 2 + props_len], PROPERTY_TAGS)
