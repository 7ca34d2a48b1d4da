"""mqctl queryMsgTraceById's reading of trace messages (ctl.trace.trace_rows): SubBefore and SubAfter paired by
requestId, a record stored twice counted once, deliveries without an answer shown as unknown, records of other
messages and unreadable trace messages left out."""

from __future__ import annotations

from types import SimpleNamespace

from client.trace_codec import TraceRecord, TraceType, encode
from ctl.trace import trace_rows

ID = "AC11000100002A9F0000000000000001"


def stored(records, host="10.0.0.7", at=1):
    return SimpleNamespace(body=encode(records).encode(), born_host=(host, 5000), store_timestamp=at,
                           physical_offset=at)


def test_pub_and_deliveries_by_group():
    pub = TraceRecord(TraceType.PUB, 100, group="PG", topic="T", msg_id=ID, store_host="b:1", cost_ms=3)
    other = TraceRecord(TraceType.PUB, 100, group="PG", topic="T", msg_id="OTHER")
    before1 = TraceRecord(TraceType.SUB_BEFORE, 200, group="CG", request_id="R1", msg_id=ID)
    after1 = TraceRecord(TraceType.SUB_AFTER, 205, request_id="R1", msg_id=ID, cost_ms=5, success=False,
                         context_code=4)
    before2 = TraceRecord(TraceType.SUB_BEFORE, 300, group="CG", request_id="R2", msg_id=ID, retry_times=1)
    after2 = TraceRecord(TraceType.SUB_AFTER, 301, request_id="R2", msg_id=ID, cost_ms=1)
    pending = TraceRecord(TraceType.SUB_BEFORE, 250, group="CG2", request_id="R3", msg_id=ID)
    msgs = [stored([pub, other], host="10.0.0.1"), stored([pub]),  # the producer's trace message, stored twice
            stored([before1, after1, before2], at=2), stored([after2, pending], at=3),
            SimpleNamespace(body=b"SubBefore\x01not a number", born_host=("h", 1), store_timestamp=4,
                            physical_offset=4)]
    pubs, subs = trace_rows(ID, msgs)
    assert [(p["group"], p["clientHost"], p["storeHost"], p["costMs"], p["status"]) for p in pubs] == [
        ("PG", "10.0.0.1", "b:1", 3, "success")]
    assert [(s["group"], s["time"], s["costMs"], s["status"], s["retryTimes"]) for s in subs] == [
        ("CG", 200, 5, "failed", 0), ("CG", 300, 1, "success", 1), ("CG2", 250, None, "unknown", 0)]


def test_a_sub_after_without_its_sub_before_still_shows():
    after = TraceRecord(TraceType.SUB_AFTER, 9, request_id="R", msg_id=ID, cost_ms=2)
    pubs, subs = trace_rows(ID, [stored([after])])
    assert pubs == [] and [(s["group"], s["status"], s["costMs"]) for s in subs] == [("", "success", 2)]
