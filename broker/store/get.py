"""The read path: RocketMQ DefaultMessageStore.getMessage over consume queue + commitlog.

Statuses and ``next_begin_offset`` follow 4.9.8 exactly (spec §5.1):
- no queue -> NO_MATCHED_LOGIC_QUEUE, next = correction(offset, 0); empty queue -> NO_MESSAGE_IN_QUEUE, same;
- offset < min -> OFFSET_TOO_SMALL, next = correction(offset, min);
- offset == max -> OFFSET_OVERFLOW_ONE, next = offset; offset > max -> OFFSET_OVERFLOW_BADLY, next =
  correction(offset, min if min == 0 else max);
- inside [min, max): units are scanned; each message is "in disk" when the commitlog head is more than
  ``accessMessageInMemoryMaxRatio`` % of physical RAM ahead of it, which picks the batch caps (in memory 256 KiB
  / 32 messages, in disk 64 KiB / 8); a batch always carries at least one message. The TagFilter checks the
  unit's tags code, then the record's TAGS. next = offset + units examined. A unit whose record is gone
  (MESSAGE_WAS_REMOVING) skips to the next commitlog file. ``suggest_pulling_from_slave`` is set when the
  head is that far ahead of the last unit examined. The queue's file missing -> OFFSET_FOUND_NULL.

``correction(old, new)`` is ``new`` except on a SLAVE without ``offsetCheckInSlave``, where it is ``old``.
Pure reads of memory-mapped files: no awaits, safe on the event loop.
"""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING

from broker.config import BrokerRole
from broker.store.consume_queue import UNIT, UNIT_SIZE
from broker.store.types import GetResult, GetStatus
from remoting.message_codec import MIN_RECORD_SIZE, PROPERTY_TAGS, TagFilter, property_value

if TYPE_CHECKING:
    from broker.store.commitlog import CommitLog
    from broker.store.message_store import MessageStore

_STORE_TS_AT = 56  # STORETIMESTAMP offset in a record
_I32 = struct.Struct(">i").unpack_from
_I16 = struct.Struct(">h").unpack_from
_TAGS_NEEDLE = PROPERTY_TAGS.encode() + b"\x01"
_TAGS_SEP_NEEDLE = b"\x02" + _TAGS_NEEDLE
_FALLBACK_MEMORY = 24 * 1024**3


def total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return _FALLBACK_MEMORY


TOTAL_PHYSICAL_MEMORY = total_physical_memory()


def get_message(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    max_total_bytes: int,
    tag_filter: TagFilter | None,
) -> GetResult:
    cfg = store.config
    correct = store.role is not BrokerRole.SLAVE or cfg.offset_check_in_slave

    def correction(old: int, new: int) -> int:
        return new if correct else old

    max_offset_py = store.max_phy_offset
    cq = store._cq(topic, queue_id)
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

    memory = TOTAL_PHYSICAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100
    commitlog = store._commitlog
    file_size = commitlog.file_size
    find_file = commitlog.files.find
    filt = tag_filter if tag_filter is not None and not tag_filter.match_all else None
    codes = filt.codes if filt is not None else None
    status = GetStatus.NO_MATCHED_MESSAGE
    records: list[bytes] = []
    append = records.append
    count = 0
    total = 0
    next_phy_file_start = -1
    max_phy_pulling = 0
    # the batch caps of _batch_full, hoisted: a unit is "in disk" when its offset is below disk_below
    disk_below = max_offset_py - memory
    cap = max_total_bytes if max_total_bytes > 0 else -1
    disk_bytes, disk_count = cfg.max_transfer_bytes_on_message_in_disk, cfg.max_transfer_count_on_message_in_disk
    mem_bytes, mem_count = cfg.max_transfer_bytes_on_message_in_memory, cfg.max_transfer_count_on_message_in_memory
    # the commitlog file of the last record read: [lo, hi) is its readable range, mm its mapping. Records of a
    # queue written together are contiguous in one file, so most units skip the file lookup and the read call
    lo = hi = 0
    mm = None
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
            mf = find_file(offset_py)
            if mf is not None:
                lo = mf.start_offset
                hi = lo + mf.wrote_position
                mm = mf.mapping
            if mf is None or end_py > hi:
                if not count:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = offset_py + file_size - offset_py % file_size
                continue
        raw = mm[offset_py - lo : end_py - lo]
        if filt is not None and not filt.match_tags(_record_tags(raw) or ""):
            continue
        append(raw)
        count += 1
        total += size_py
        next_phy_file_start = -1
    else:
        i = n_units
    if count:
        status = GetStatus.FOUND
    suggest = (max_offset_py - max_phy_pulling) > memory
    return GetResult(
        status,
        next_begin_offset=offset + i,
        min_offset=min_offset,
        max_offset=max_offset,
        records=records,
        suggest_pulling_from_slave=suggest,
        total_bytes=total,
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


def store_time_of(commitlog: CommitLog, phy_offset: int) -> int:
    """STORETIMESTAMP of the record at ``phy_offset``, -1 when unreadable."""
    found = commitlog.view_at(phy_offset)
    if found is None:
        return -1
    mf, pos = found
    if pos + _STORE_TS_AT + 8 > mf.wrote_position:
        return -1
    return int.from_bytes(mf.buffer[pos + _STORE_TS_AT : pos + _STORE_TS_AT + 8], "big", signed=True)


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
