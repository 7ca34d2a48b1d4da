"""Finding stored messages: QUERY_MESSAGE (12) by key and VIEW_MESSAGE_BY_ID (33) by commitlog offset
(RocketMQ QueryMessageProcessor; spec remoting.md §2.4, §4.5).

VIEW_MESSAGE_BY_ID, header ``offset`` (the commitlog offset inside an offset msgId, spec §6.5): the body is the
stored record as it is on disk, only when a whole message record starts exactly there (``broker.record_reader``).
Otherwise RocketMQ's remark ``can not find message by the offset`` with 29 INVALID_PARAMETER (no message ever
started there: the msgId is wrong) or 22 QUERY_NOT_FOUND (the file expired); RocketMQ answers 1, which its clients
treat like any other failure (mqadmin then queries by UNIQ_KEY), while pyrmq's 1 would say "retry".

QUERY_MESSAGE, header ``topic``, ``key``, ``maxNum``, ``beginTimestamp``, ``endTimestamp`` (ms) and the ext field
``_UNIQUE_KEY_QUERY`` (``true``: a UNIQ_KEY lookup, ``maxNum`` becomes 32 as RocketMQ's ``defaultQueryMaxNum``;
any query returns at most 64, ``maxMsgsNumBatch``). As RocketMQ, from the message index (``topic#key`` for every
KEYS entry and the UNIQ_KEY, ``broker/store/index_service.py``), master and slave alike: each candidate the index
gives is read and kept only if it really is a message of ``topic`` with that key stored within
[beginTimestamp, endTimestamp] (hash collisions, expired files); the records the index has not reached yet are
scanned, so a message is found as soon as its send was answered. Newest first; the body is the stored records,
concatenated; headers ``indexLastUpdateTimestamp`` / ``indexLastUpdatePhyoffset`` are the index's newest entry.
No match answers 22 QUERY_NOT_FOUND with RocketMQ's remark (RocketMQ's clients turn it into NO_MESSAGE 208, "query
message by key finished, but no message"). With ``messageIndexEnable=false`` the commitlog is scanned instead:
from the newest file whose first record is at or before ``beginTimestamp``, never more than ``MAX_SCAN_BYTES``
back from the end, the remark naming the range scanned.

Scans follow the commitlog's own chain of records from a file's first byte (or the index's position, a record
start), so bytes shaped like a record inside a message body are never taken for one (issue 22 item 6); an index
candidate is read only where the index put a record start and checked as a whole record. Scans run on the event
loop in slices of ``SLICE_RECORDS`` records (other requests are served between slices) and hold no view of the
store's mapping across slices, so file cleanup is never blocked by them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque

from broker.context import BrokerContext
from broker.record_reader import RecordRefusal, max_record_size, record_at
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields
from remoting.message_codec import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, RecordStatus, check_record, property_value

MAX_SCAN_BYTES = 256 * 1024 * 1024
SLICE_RECORDS = 2048
DEFAULT_QUERY_MAX_NUM = 32  # RocketMQ MessageStoreConfig.defaultQueryMaxNum: the cap of a UNIQ_KEY query
MAX_MSGS_NUM_BATCH = 64  # RocketMQ MessageStoreConfig.maxMsgsNumBatch: the cap of any query
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
INDEX_CANDIDATES = 4 * MAX_MSGS_NUM_BATCH  # index hits read per query: room for hash collisions and expired ones


def view_message(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    offset = Fields(request.ext, "VIEW_MESSAGE_BY_ID").req_long("offset")
    record = record_at(ctx.store, offset, max_record_size(ctx.max_message_size), ctx.broker_name)
    if isinstance(record, RecordRefusal):
        return response_to(request, record.code, record.remark)
    return response_to(request, ResponseCode.SUCCESS, body=record)


def matches(properties: bytes, key: str) -> bool:
    if property_value(properties, PROPERTY_UNIQ_KEY) == key:
        return True
    keys = property_value(properties, PROPERTY_KEYS)
    return keys is not None and key in keys.split(" ")


def scan_start(store, begin_timestamp: int) -> tuple[int, bool]:
    """(offset to scan from, whether older data was left out to stay within ``MAX_SCAN_BYTES``)."""
    end = store.max_phy_offset
    begin = store.commitlog_start_at_time(max(0, begin_timestamp))
    floor = end - MAX_SCAN_BYTES
    if begin >= floor:
        return begin, False
    file_size = store.config.mapped_file_size_commit_log
    last_file = (end - 1) - (end - 1) % file_size
    return min(-(-floor // file_size) * file_size, last_file), True


async def scan_range(store, start: int, end: int, topic: str, key: str, begin_ts: int, end_ts: int,
                     found: deque[int]) -> tuple[int, int]:
    """Scan [start, end) for matches (appended to ``found``, oldest first) in slices that yield to the loop;
    returns (where the scan stopped, the store time of the last record read)."""
    pos, last_time = start, 0
    while pos < end:
        records = store.scan_commitlog(pos, end)
        advanced = False
        try:
            for phy, result in itertools.islice(records, SLICE_RECORDS):
                if result.status is not RecordStatus.VALID:
                    end = pos  # a record being written or damaged: stop where the readable log ends
                    break
                info = result.info
                pos, last_time, advanced = phy + result.size, info.store_timestamp, True
                if info.topic == topic and begin_ts <= info.store_timestamp <= end_ts and matches(info.properties, key):
                    found.append(phy)
        finally:
            records.close()  # releases the mapping view before the loop yields
        if not advanced:
            break
        await asyncio.sleep(0)
    return pos, last_time


def verified(store, phy: int, topic: str, key: str, begin_ts: int, end_ts: int) -> bytes | None:
    """The record at an index candidate when it is really a match: a hash collision, an expired file or a truncated
    tail make a candidate that is not."""
    raw = store.read_record(phy)
    if raw is None:
        return None
    result = check_record(raw, 0)
    info = result.info
    if (result.status is not RecordStatus.VALID or info.physical_offset != phy or info.topic != topic
            or not begin_ts <= info.store_timestamp <= end_ts or not matches(info.properties, key)):
        return None
    return raw


async def query_message(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    f = Fields(request.ext, "QUERY_MESSAGE")
    topic, key = f.req_str("topic"), f.req_str("key")
    max_num = f.req_int("maxNum")
    begin_ts, end_ts = f.req_long("beginTimestamp"), f.req_long("endTimestamp")
    if f.bool(UNIQUE_KEY_QUERY):
        max_num = DEFAULT_QUERY_MAX_NUM
    max_num = max(1, min(max_num, MAX_MSGS_NUM_BATCH))
    store = ctx.store
    if store.index is not None:
        return await query_index(ctx, request, topic, key, max_num, begin_ts, end_ts)
    start, cut = scan_start(store, begin_ts)
    found: deque[int] = deque(maxlen=max_num)
    pos, last_time = await scan_range(store, start, store.max_phy_offset, topic, key, begin_ts, end_ts, found)
    scanned = f"scanned commitlog [{start}, {pos}) ({(pos - start) / 2**20:.1f} MiB) of {ctx.broker_name}"
    if cut:
        scanned += f"; older records were not scanned (at most {MAX_SCAN_BYTES >> 20} MiB): raise beginTimestamp"
    bodies = [r for r in map(store.read_record, reversed(found)) if r is not None]
    ext = {"indexLastUpdateTimestamp": str(last_time), "indexLastUpdatePhyoffset": str(pos)}
    if not bodies:
        return response_to(
            request,
            ResponseCode.QUERY_NOT_FOUND,
            f"can not find message, maybe time range not correct; messageIndexEnable=false on {ctx.broker_name}, "
            f"which {scanned}",
            ext=ext,
        )
    return response_to(request, ResponseCode.SUCCESS, ext=ext, body=bodies)


async def query_index(ctx: BrokerContext, request: RemotingCommand, topic: str, key: str, max_num: int,
                      begin_ts: int, end_ts: int) -> RemotingCommand:
    """From the index (``broker/store/index_service.py``), plus a scan of the records it has not reached yet, so a
    message is found the moment its send was answered."""
    store = ctx.store
    tail: deque[int] = deque(maxlen=max_num)
    indexed_upto = store.index.position
    tail_from = max(indexed_upto, store.max_phy_offset - MAX_SCAN_BYTES)  # an index far behind: bounded all the same
    await scan_range(store, tail_from, store.max_phy_offset, topic, key, begin_ts, end_ts, tail)
    bodies = [r for r in map(store.read_record, reversed(tail)) if r is not None]
    if len(bodies) < max_num:
        candidates = store.index_candidates(topic, key, INDEX_CANDIDATES, begin_ts, end_ts)
        for phy in candidates:
            if phy in tail or phy >= indexed_upto:
                continue
            raw = verified(store, phy, topic, key, begin_ts, end_ts)
            if raw is not None:
                bodies.append(raw)
                if len(bodies) >= max_num:
                    break
    last_ts, last_phy = store.index.last_update
    ext = {"indexLastUpdateTimestamp": str(last_ts), "indexLastUpdatePhyoffset": str(last_phy)}
    if not bodies:
        return response_to(request, ResponseCode.QUERY_NOT_FOUND,
                           f"can not find message, maybe time range not correct; {ctx.broker_name}'s index has no "
                           f"message of topic {topic} with key {key} stored in [{begin_ts}, {end_ts}]", ext=ext)
    return response_to(request, ResponseCode.SUCCESS, ext=ext, body=bodies)


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.QUERY_MESSAGE, lambda conn, req: query_message(ctx, conn, req))
    server.register(RequestCode.VIEW_MESSAGE_BY_ID, lambda conn, req: view_message(ctx, conn, req))
