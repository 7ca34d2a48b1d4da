"""The put path's locked half: ``append_batch`` (under the put lock: queue offsets, placement in commitlog files,
one encode into one bytearray, one pwrite per file touched, one consume-queue write per queue) of a batch
``put_prepare`` validated. ``append_simple`` is the common case (one queue, everything fits the current files)
with no await at all, so the facade runs it without the lock. Then, outside the lock, ``wait_stored`` waits for
the flush and the replica, and ``write_failed`` answers a put whose file creation or write failed.

Placement (RocketMQ's rule for batches): a batch goes to the current file when ``total + 8 <= remaining``;
else, if it fits an empty file, the current file is closed with a BLANK record and the batch goes to the next
file; else (a batch larger than a file) it is split into chunks of whole records, each chunk filling a file up
to 8 bytes before its end. Every file a batch needs is created *before* the first byte is written, so a
failure to create one (ENOSPC) leaves the store untouched.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import struct
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from broker.store.cleanup import DiskMonitor
from broker.store.commitlog import CommitLog
from broker.store.consume_queue import UNIT, UNIT_SIZE
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.dispatch_state import DispatchState
from broker.store.flush import GroupCommitService
from broker.store.put_prepare import E_DISPATCHED, E_QUEUE, E_SIZE, E_TOPIC, Entry, Prepared
from broker.store.types import PutResult, PutStatus
from remoting.message_codec import BLANK_SIZE, HEADER, MESSAGE_MAGIC

log = logging.getLogger(__name__)

_crc32 = zlib.crc32
_pack_header = HEADER.pack
_pack_unit = UNIT.pack
_PROPS_LEN = struct.Struct(">h").pack


# waiter(next_offset) or waiter(next_offset, deadline): (status, remark) once replicated, or at slaveTimeout or the
# sender's deadline (event-loop time), whichever comes first
ReplicaWaiter = Callable[..., Awaitable[tuple[PutStatus, str]]]


def now_ms() -> int:
    return time.time_ns() // 1_000_000



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

    __slots__ = ("commitlog", "delay_levels_ms", "index_feed", "queues", "state", "stats", "store_host")

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
        # the message index's offer_put: each appended batch, so the index never parses these records again
        self.index_feed: Callable[[list, list[int], int, int, bool], None] | None = None

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
        if self.index_feed is not None:
            self.index_feed(prepared.entries, phys, store_ts, next_offset, prepared.all_dispatched)
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
