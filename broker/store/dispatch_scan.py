"""Lean record scanner for the dispatcher: consume-queue units straight from commitlog bytes.

Why a second parser: on a SLAVE the dispatcher parses every replicated record, and with ``check_record`` +
``property_value`` that cost ~5 µs per record (a CheckResult and a DispatchInfo per record, topic and
properties copied to ``bytes``, the properties copied again to find TAGS, an lru_cache call per tag): 83% of
the slave's CPU under SYNC load, enough to fall behind the master. This scanner reads only what a unit
needs, with one precompiled ``unpack_from`` per record, finds ``TAGS\\x01`` with ``find`` on the mapping
itself (no copy of the properties), and caches topic bytes -> str and tag bytes -> Java hash.

What it still checks is exactly ``check_record``'s structural verdict (VALID / BLANK / INCOMPLETE /
CORRUPT with the same size rules, topic and property shape checks), so a torn or zeroed tail stops the
dispatcher the same way. It does NOT check the body CRC: recovery does (``check_record(check_crc=True)``
via the commitlog scan), and replicated bytes were validated when the master wrote them.
``tests/unit/store/test_dispatch_scan.py`` proves equivalence with the full parser over generated records
and chunkings.

Pure: no I/O, no store state; the caches are plain dicts bounded by ``_CACHE_MAX``.
"""

from __future__ import annotations

import struct

from broker.store.consume_queue import UNIT
from broker.store.types import SCHEDULE_TOPIC
from remoting.headers import NumberError, parse_int
from remoting.message_codec import (
    BLANK_MAGIC,
    BLANK_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PROPERTY_DELAY_TIME_LEVEL,
    RecordStatus,
    java_string_hash,
    property_value,
)

# total, magic, (crc), queue id, (flag), queue offset, physical offset, sys flag, (born ts+host), store ts,
# (store host, reconsume times, prepared tx offset), body length: the 88-byte header minus what units ignore.
_HEAD = struct.Struct(">ii4xi4xqqi16xq20xi")
_HEAD_SIZE = 88
_PAIR = struct.Struct(">ii")
_TAGS = b"TAGS\x01"
_CACHE_MAX = 65536

_topics: dict[bytes, str | None] = {}  # raw topic -> str, or None when it is not a valid topic (CORRUPT)
_tags: dict[bytes, int] = {}  # raw tag value -> tags code


def _topic_of(raw: bytes) -> str | None:
    """Decode and vet a topic once per distinct byte string (the check_record rules: non-empty, no NUL, UTF-8)."""
    topic: str | None = None
    if raw and 0 not in raw:
        try:
            topic = raw.decode("utf-8")
        except UnicodeDecodeError:
            topic = None
    if len(_topics) >= _CACHE_MAX:
        _topics.clear()
    _topics[raw] = topic
    return topic


def _tag_code(raw: bytes) -> int:
    text = raw.decode("utf-8", "replace")  # as property_value decodes it
    code = java_string_hash(text) if text else 0
    if len(_tags) >= _CACHE_MAX:
        _tags.clear()
    _tags[raw] = code
    return code


def _classify(total: int, magic: int, avail: int, max_size: int) -> tuple[RecordStatus, int, str]:
    """A record head that is not a complete message: BLANK, INCOMPLETE or CORRUPT (check_record's rules)."""
    if magic == BLANK_MAGIC:
        if total < BLANK_SIZE:
            return RecordStatus.CORRUPT, 0, f"blank record claims {total} bytes"
        return RecordStatus.BLANK, total, ""
    if magic != MESSAGE_MAGIC:
        return RecordStatus.CORRUPT, 0, f"magic code {magic & 0xFFFFFFFF:#010x}"
    if total < MIN_RECORD_SIZE or total > max_size:
        return RecordStatus.CORRUPT, 0, f"total size {total} outside [{MIN_RECORD_SIZE}, {max_size}]"
    return RecordStatus.INCOMPLETE, 0, f"record of {total} bytes, {avail} available"


class ScanResult:
    """Where a scan stopped and why; ``units`` are the queue runs found, in the order they were started."""

    __slots__ = ("last_ts", "pos", "reason", "records", "size", "status", "units")

    def __init__(self) -> None:
        self.pos = 0
        self.status: RecordStatus | None = None  # None: reached the limit or the byte budget
        self.size = 0  # BLANK: bytes to the file end
        self.reason = ""
        self.last_ts = 0
        self.records = 0
        # [topic, queue id, first queue offset, bytearray of 20-byte units, next queue offset]
        self.units: list[list] = []


def scan(
    buf,
    pos: int,
    limit: int,
    *,
    max_size: int,
    delay_ms: list[int],
    budget: int = 1 << 62,
    result: ScanResult | None = None,
    index_records: list | None = None,
) -> ScanResult:
    """Parse records in ``buf[pos:limit]`` and build their consume-queue units.

    ``buf`` is anything with the buffer protocol, indexing and ``find(sub, start, end)`` (an ``mmap`` or
    ``bytes``). Stops at the limit, at the first record that is not VALID (its status, size and reason in the
    result, ``pos`` at its start), or at the first record boundary at or past ``pos + budget`` (so a round is
    bounded in time but never cuts a large record). Pass ``result`` to keep adding to the same unit runs, and
    ``index_records`` to get ``(offset, topic, properties, store timestamp, sys flag)`` of every record for the
    message index (``IndexService.offer_scanned``), so it does not parse them again.
    """
    res = result if result is not None else ScanResult()
    units = res.units
    runs: dict[tuple[str, int], list] = {}
    for run in units:
        runs[(run[0], run[1])] = run
    run = None  # the run the previous record went to (a batch fills one queue: skip the dict lookup)
    unpack = _HEAD.unpack_from
    pack_unit = UNIT.pack
    find = buf.find
    topics, tags = _topics, _tags
    max_level = len(delay_ms)
    stop_at = pos + budget
    last_ts = res.last_ts
    count = 0
    status = None
    reason = ""
    size = 0
    while pos < limit and pos < stop_at:
        avail = limit - pos
        if avail < _HEAD_SIZE + 3:
            if avail < 8:
                status, reason = RecordStatus.INCOMPLETE, f"only {avail} bytes"
                break
            # too short for a full header: only the first two fields can tell what this is
            total, magic = _PAIR.unpack_from(buf, pos)
            status, size, reason = _classify(total, magic, avail, max_size)
            break
        total, magic, qid, qoff, phy, sys_flag, store_ts, body_len = unpack(buf, pos)
        if magic != MESSAGE_MAGIC or total < MIN_RECORD_SIZE or total > max_size or avail < total:
            status, size, reason = _classify(total, magic, avail, max_size)
            break
        if body_len < 0 or _HEAD_SIZE + body_len + 3 > total:
            status, reason = RecordStatus.CORRUPT, f"body length {body_len} does not fit in {total}"
            break
        p = pos + _HEAD_SIZE + body_len
        topic_len = buf[p]
        props_at = p + 1 + topic_len
        end = pos + total
        if props_at + 2 > end:
            status, reason = RecordStatus.CORRUPT, f"topic length {topic_len} does not fit"
            break
        props_len = (buf[props_at] << 8) | buf[props_at + 1]
        if props_len & 0x8000 or MIN_RECORD_SIZE + topic_len + body_len + props_len != total:
            status, reason = RecordStatus.CORRUPT, f"total size {total} disagrees with the length fields"
            break
        raw_topic = buf[p + 1 : props_at]
        topic = topics.get(raw_topic, 0)
        if topic == 0:
            topic = _topic_of(raw_topic)
        if topic is None:
            status, reason = RecordStatus.CORRUPT, "topic is empty, contains NUL bytes or is not UTF-8"
            break
        props_start = props_at + 2
        code = 0
        if props_len:
            if buf[end - 1] != 2:
                status, reason = RecordStatus.CORRUPT, "properties are not k\\x01v\\x02 pairs"
                break
            at = find(_TAGS, props_start, end)  # also proves a \x01 is there, as check_record demands
            while at > props_start and buf[at - 1] != 2:  # "TAGS\x01" must start a key
                at = find(_TAGS, at + 1, end)
            if at >= 0:
                vstart = at + 5
                raw = buf[vstart : find(b"\x02", vstart, end)]
                code = tags.get(raw)
                if code is None:
                    code = _tag_code(raw)
            elif find(b"\x01", props_start, end) < 0:
                status, reason = RecordStatus.CORRUPT, "properties are not k\\x01v\\x02 pairs"
                break
        if not sys_flag & 4:  # transaction PREPARED (0x4) / ROLLBACK (0xC) records get no unit
            if topic == SCHEDULE_TOPIC:
                try:
                    level = parse_int(property_value(buf[props_start:end], PROPERTY_DELAY_TIME_LEVEL) or 0)
                except NumberError:  # the put path stores only levels that parse; anything else is due first
                    level = 1
                level = min(max(level, 1), max_level)
                code = store_ts + delay_ms[level - 1]
            if run is None or run[1] != qid or run[0] is not topic or run[4] != qoff:
                run = runs.get((topic, qid))
                if run is None or run[4] != qoff:
                    run = [topic, qid, qoff, bytearray(), qoff]
                    runs[(topic, qid)] = run
                    units.append(run)
            run[3] += pack_unit(phy, total, code)
            run[4] = qoff + 1
        if index_records is not None:
            index_records.append((phy, topic, buf[props_start:end], store_ts, sys_flag))
        last_ts = store_ts
        pos = end
        count += 1
    res.pos = pos
    res.status = status
    res.size = size
    res.reason = reason
    res.last_ts = last_ts
    res.records += count
    return res
