"""The dispatcher's lean scanner must give the same verdicts and the same consume-queue units as the full
parser (``check_record`` + ``property_value``, what the dispatcher used before), over generated records,
damaged bytes and arbitrary chunkings (a slave sees records split across HA frames)."""

from __future__ import annotations

import mmap

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.dispatch_scan import ScanResult, scan
from broker.store.put_prepare import tags_hash
from broker.store.types import SCHEDULE_TOPIC
from remoting.message_codec import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TAGS,
    RecordStatus,
    blank_record,
    check_record,
    encode_record,
    host_bytes,
    property_value,
)
from tests.stored_records import stored_record

DELAY_MS = [1000, 5000, 10000]
MAX_SIZE = 1 << 16
HOST = host_bytes("10.0.0.1", 10911)


def reference(buf: bytes, pos: int, delay_ms=DELAY_MS):
    """The dispatcher's former per-record path: (stop position, status or None, blank size, units per queue)."""
    units: dict[tuple[str, int], list] = {}
    last_ts = 0
    while pos < len(buf):
        res = check_record(buf, pos, max_size=MAX_SIZE)
        if res.status is not RecordStatus.VALID:
            return pos, res.status, res.size, units, last_ts
        info = res.info
        if (info.sys_flag & 0xC) not in (0x4, 0xC):
            if info.topic == SCHEDULE_TOPIC:
                level = int(property_value(info.properties, PROPERTY_DELAY_TIME_LEVEL) or 0)
                level = min(max(level, 1), len(delay_ms))
                code = info.store_timestamp + delay_ms[level - 1]
            else:
                tags = property_value(info.properties, PROPERTY_TAGS)
                code = tags_hash(tags) if tags else 0
            units.setdefault((info.topic, info.queue_id), []).append(
                (info.queue_offset, info.physical_offset, info.size, code)
            )
        last_ts = info.store_timestamp
        pos += res.size
    return pos, None, 0, units, last_ts


def flatten(res: ScanResult) -> dict[tuple[str, int], list]:
    out: dict[tuple[str, int], list] = {}
    for topic, qid, first, data, nxt in res.units:
        assert len(data) == (nxt - first) * 20
        for i in range(nxt - first):
            phy = int.from_bytes(data[i * 20 : i * 20 + 8], "big", signed=True)
            size = int.from_bytes(data[i * 20 + 8 : i * 20 + 12], "big", signed=True)
            code = int.from_bytes(data[i * 20 + 12 : i * 20 + 20], "big", signed=True)
            out.setdefault((topic, qid), []).append((first + i, phy, size, code))
    return out


# Properties as raw bytes from pieces that stress the TAGS search: keys ending in TAGS, TAGS inside values,
# empty values, missing separators (those records must come out CORRUPT on both sides).
PIECES = [b"TAGS", b"\x01", b"\x02", b"a", b"XTAGS", b"DELAY", b"2", b"\xff", b"\xc3\xa9", b"TAGS\x01"]
props_st = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join),
    st.dictionaries(
        st.sampled_from(["TAGS", "KEYS", "DELAY", "XTAGS", "é"]),
        st.sampled_from(["", "a", "tagA", "2", "99", "é€"]),
        max_size=4,
    ).map(lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items()).encode()),
)
topic_st = st.sampled_from([b"T", b"TopicA", SCHEDULE_TOPIC.encode(), b"%RETRY%g", b"", b"a\x00b", b"\xff\xfe"])


@st.composite
def records(draw):
    out = bytearray()
    qoffs: dict = {}
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.integers(0, 9))
        if kind == 0 and out:
            out += blank_record(draw(st.sampled_from([8, 4, 20])))  # reaches the "file end" only by luck
            continue
        topic = draw(topic_st)
        qid = draw(st.integers(0, 2))
        props = draw(props_st)
        if topic == SCHEDULE_TOPIC.encode():
            props = draw(st.sampled_from([b"DELAY\x012\x02", b"DELAY\x0199\x02", b"", b"X\x01y\x02"]))
        key = (topic, qid)
        qoff = draw(st.sampled_from([qoffs.get(key, 0), 7]))  # mostly contiguous, sometimes a jump
        qoffs[key] = qoff + 1
        rec = bytearray(
            encode_record(
                topic_bytes=topic,
                queue_id=qid,
                flag=0,
                queue_offset=qoff,
                physical_offset=len(out),
                sys_flag=draw(st.sampled_from([0, 0, 0x4, 0x8, 0xC])),
                born_timestamp=1,
                born_host=HOST,
                store_timestamp=draw(st.integers(0, 10**13)),
                store_host=HOST,
                reconsume_times=0,
                body=draw(st.binary(min_size=0, max_size=40)),
                properties=props,
            )
        )
        if kind == 9:  # damage a byte somewhere in the record
            at = draw(st.integers(0, len(rec) - 1))
            rec[at] = draw(st.integers(0, 255))
        out += rec
    if draw(st.booleans()):
        out += draw(st.binary(max_size=30))  # a torn or garbage tail
    return bytes(out)


def is_schedule_level_error(buf: bytes) -> bool:
    try:
        reference(buf, 0)
    except ValueError:
        return True
    return False


@settings(max_examples=600, deadline=None)
@given(records())
def test_scan_matches_the_full_parser(buf):
    if is_schedule_level_error(buf):
        return  # DELAY=garbage raises in both (the dispatcher logs and retries); not a verdict to compare
    pos, status, size, units, last_ts = reference(buf, 0)
    res = scan(buf, 0, len(buf), max_size=MAX_SIZE, delay_ms=DELAY_MS)
    assert (res.pos, res.status, res.size) == (pos, status, size)
    assert flatten(res) == units
    assert res.last_ts == last_ts


@settings(max_examples=400, deadline=None)
@given(records(), st.lists(st.integers(0, 2000), max_size=6), st.integers(1, 400))
def test_scan_in_chunks_and_budgets_matches_one_pass(buf, cuts, budget):
    """Bytes arriving in pieces, scanned in bounded rounds, give the same result as one pass over them all."""
    if is_schedule_level_error(buf):
        return
    mm = mmap.mmap(-1, max(len(buf), 1))
    mm[: len(buf)] = buf
    res = ScanResult()
    for limit in sorted({min(c, len(buf)) for c in cuts} | {len(buf)}):
        while True:
            before = res.pos
            scan(mm, res.pos, limit, max_size=MAX_SIZE, delay_ms=DELAY_MS, budget=budget, result=res)
            if res.status is not None or res.pos == before or res.pos >= limit:
                break
            assert res.pos - before < budget + MAX_SIZE  # a round never runs far past its budget
        if res.status in (RecordStatus.CORRUPT, RecordStatus.BLANK):
            break
    pos, status, size, units, _ = reference(buf, 0)
    assert (res.pos, res.status, res.size) == (pos, status, size)
    assert flatten(res) == units


def test_tags_found_only_as_a_key():
    props = b"XTAGS\x01no\x02K\x01TAGS\x01\x02TAGS\x01yes\x02"
    rec = stored_record(born_host=HOST, store_host=HOST, body=b"b", properties=props)
    res = scan(rec, 0, len(rec), max_size=MAX_SIZE, delay_ms=DELAY_MS)
    assert flatten(res) == {("T", 0): [(0, 0, len(rec), tags_hash("yes"))]}


def test_budget_stops_at_a_record_boundary_and_never_cuts_a_big_record():
    recs = [
        stored_record(queue_offset=i, born_host=HOST, store_timestamp=i, store_host=HOST, body=b"x" * 500)
        for i in range(3)
    ]
    buf = b"".join(recs)
    res = scan(buf, 0, len(buf), max_size=MAX_SIZE, delay_ms=DELAY_MS, budget=10)
    assert res.status is None and res.pos == len(recs[0]) and res.records == 1
    scan(buf, res.pos, len(buf), max_size=MAX_SIZE, delay_ms=DELAY_MS, budget=1 << 20, result=res)
    assert res.pos == len(buf) and res.units[0][2:] == [0, res.units[0][3], 3]
