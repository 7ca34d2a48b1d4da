"""ConsumeQueue: the index of one (topic, queueId): fixed 20-byte units pointing into the commitlog.

Layout: ``<root>/consumequeue/<topic>/<queueId>/<20-digit start byte offset>``, files of
``mappedFileSizeConsumeQueue`` bytes (a multiple of 20). Queue offset ``q`` is the unit at byte ``q * 20`` of
the concatenated files. Each unit, big-endian:

    off 0   i64  commitLogOffset    physical offset of the record
    off 8   i32  size               the record's TOTALSIZE
    off 12  i64  tagsCode           Java hashCode of TAGS (0 if none); SCHEDULE_TOPIC_XXXX: delivery time (ms)

A queue that starts at a non-zero offset (a slave that began copying mid-log) pads the front of its first
file with placeholder units ``(0, 0x7FFFFFFF, 0)``; ``min_offset`` points past them.

Invariants: unit ``q`` lives at byte ``q * 20`` (gaps are filled with placeholders, never shifted); commitlog
offsets grow with ``q``; ``max_physic_offset`` is the end (offset + size) of the last real unit. The queue
is derived data: recovery cuts it back to the commitlog end (``truncate_dirty``) and re-dispatch fills what a
crash lost. Writes are idempotent per queue offset (a unit below the write position is skipped), so
re-dispatching a range twice is harmless.

Files are created sparse and their blocks reserved ahead of the writes (``MappedFile.reserve``) through
``prepare`` on the disk executor, so a write itself is one pwrite per file touched and never meets ENOSPC: a
one-message queue costs one 4 KiB block, not its whole ``mappedFileSizeConsumeQueue`` file. Files belong to the
store's ``OpenFiles`` cache, which parks idle ones (see ``open_files``). Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from broker.store.mapped_file import FileCache, MappedFile
from broker.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

UNIT = struct.Struct(">qiq")
UNIT_SIZE = 20
PLACEHOLDER_SIZE = 0x7FFFFFFF
PLACEHOLDER = UNIT.pack(0, PLACEHOLDER_SIZE, 0)



def first_unit_at_or_past(mf: MappedFile, phy_offset: int) -> int:
    """The index in ``mf`` of the first real unit whose commitlog offset is ``phy_offset`` or more (the number of
    units written when none is): real units grow with the queue offset, so a binary search finds it."""
    buf = mf.buffer
    lo, hi = 0, mf.wrote_position // UNIT_SIZE
    while lo < hi:
        mid = (lo + hi) // 2
        offset, size, _ = UNIT.unpack_from(buf, mid * UNIT_SIZE)
        if size != PLACEHOLDER_SIZE and offset >= phy_offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


# Runs a blocking call on the store's disk executor: ``await run(fn)``.
RunBlocking = Callable[[Callable[[], Any]], Awaitable[Any]]


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: Path, file_size: int, *, cache: FileCache | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = root / topic / str(queue_id)
        self.file_size = file_size
        self.cache = cache
        self.files = MappedFileQueue(self.directory, file_size, cache=cache)
        self.min_logic_offset = 0  # bytes
        self.max_physic_offset = 0
        self.flushed_units_offset = 0
        self._ready: list[MappedFile] = []  # prepared files the write position has not reached yet
        self._creating: dict[int, asyncio.Future[MappedFile]] = {}  # start offset -> its creation in the executor
        self._cleaned_for_phy_min = -1  # the commitlog min offset the last cleanup handled (see on_commitlog_min)

    # offsets ---------------------------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        return self.files.max_offset // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return min(self.min_logic_offset // UNIT_SIZE, self.max_offset)

    # loading and recovery (blocking) ---------------------------------------------------------------------
    def load(self) -> None:
        self.files.load()

    def recover(self) -> None:
        """Find the last valid unit (scanning the newest three files with data) and drop everything after it."""
        files = self.files.files
        if not files:
            return
        newest = len(files) - 1
        while newest > 0 and UNIT.unpack_from(files[newest].buffer, 0)[1] <= 0:
            newest -= 1  # prepared but never written (a crash between prepare and write)
        first = max(0, newest - 2)
        end = files[first].start_offset
        last_real_end = 0
        for mf in files[first:]:
            buf = mf.buffer
            pos = 0
            while pos < self.file_size:
                offset, size, _ = UNIT.unpack_from(buf, pos)
                if offset < 0 or size <= 0:
                    break
                if size != PLACEHOLDER_SIZE:
                    last_real_end = offset + size
                pos += UNIT_SIZE
            end = mf.start_offset + pos
            if pos < self.file_size:
                break
        self.files.truncate_to(end)
        self.max_physic_offset = last_real_end
        self.min_logic_offset = self._first_real_unit_position()
        self.flushed_units_offset = end

    def _first_real_unit_position(self) -> int:
        first = self.files.first
        if first is None:
            return 0
        buf, pos = first.buffer, 0
        while pos < first.wrote_position:
            if UNIT.unpack_from(buf, pos)[1] != PLACEHOLDER_SIZE:
                break
            pos += UNIT_SIZE
        return first.start_offset + pos

    def truncate_dirty(self, phy_end: int) -> None:
        """Drop units pointing at or past ``phy_end`` (the recovered commitlog end)."""
        files = self.files.files
        cut = None
        for mf in reversed(files):
            lo = first_unit_at_or_past(mf, phy_end)
            cut = mf.start_offset + lo * UNIT_SIZE
            if lo > 0:
                break
        if cut is not None and cut < self.files.max_offset:
            self.files.truncate_to(cut)
            self._cleaned_for_phy_min = -1
        self._recompute_max_physic()
        self.flushed_units_offset = min(self.flushed_units_offset, self.files.max_offset)

    def _recompute_max_physic(self) -> None:
        self.max_physic_offset = 0
        for mf in reversed(self.files.files):
            pos = mf.wrote_position - UNIT_SIZE
            while pos >= 0:
                offset, size, _ = UNIT.unpack_from(mf.buffer, pos)
                if size != PLACEHOLDER_SIZE:
                    self.max_physic_offset = offset + size
                    return
                pos -= UNIT_SIZE

    def correct_min_offset(self, phy_min: int) -> None:
        """Point min_offset at the first unit whose record is still in the commitlog."""
        for mf in self.files.files:
            n = mf.wrote_position // UNIT_SIZE
            lo = first_unit_at_or_past(mf, phy_min)
            if lo < n:
                self.min_logic_offset = max(self.min_logic_offset, mf.start_offset + lo * UNIT_SIZE)
                return
        self.min_logic_offset = self.files.max_offset

    # writing ---------------------------------------------------------------------------------------------
    def missing_files(self, first_queue_offset: int, count: int) -> list[int]:
        """Start offsets of the files a write of ``count`` units at ``first_queue_offset`` still needs."""
        begin = first_queue_offset * UNIT_SIZE
        if not self.files.empty:
            begin = max(begin, self.files.max_offset)
        end = (first_queue_offset + count) * UNIT_SIZE
        if end <= begin:
            return []
        have = self._next_free_start()
        start = begin - begin % self.file_size
        if have is not None:
            start = max(start, have)
        return list(range(start, end + (self.file_size - end % self.file_size) % self.file_size, self.file_size))

    def _next_free_start(self) -> int | None:
        """Start of the first file that neither exists nor is prepared (None for an empty queue)."""
        if self._ready:
            return self._ready[-1].end_offset
        if self.files.empty:
            return None
        last = self.files.last
        return last.end_offset

    def _unreserved(self, first_queue_offset: int, count: int) -> list[tuple[MappedFile, int]]:
        """Files (existing last or prepared) the write reaches whose reserved blocks stop short of it, each with
        the position the write needs reserved."""
        end = (first_queue_offset + count) * UNIT_SIZE
        out = []
        for mf in (self.files.last, *self._ready):
            if mf is not None and mf.start_offset < end:
                need = min(mf.file_size, end - mf.start_offset)
                if need > mf.allocated_position:
                    out.append((mf, need))
        return out

    def needs_prepare(self, first_queue_offset: int, count: int) -> bool:
        """True when a write of ``count`` units at ``first_queue_offset`` needs ``prepare`` first (a file to create
        or blocks to reserve)."""
        return bool(self.missing_files(first_queue_offset, count) or self._unreserved(first_queue_offset, count))

    async def prepare(self, first_queue_offset: int, count: int, run: RunBlocking) -> None:
        """Create (executor) the files the write needs and reserve their blocks; they join the queue as the write
        reaches them. An OSError (ENOSPC) leaves the queue as it was, apart from empty prepared files.

        Cancel-safe: a caller cancelled while the executor creates a file (a put whose connection closed) does not
        lose it. The creation goes on (shielded) and its file joins ``_ready`` when it is done, whoever waits; a
        later ``prepare`` needing the same file waits for that creation instead of colliding with the file on disk
        (FileExistsError, which left the queue unwritable)."""
        missing = self.missing_files(first_queue_offset, count)
        if missing and not self.files.empty and not self._ready and missing[0] > self.files.next_start():
            missing = list(range(self.files.next_start(), missing[0], self.file_size)) + missing
        end = (first_queue_offset + count) * UNIT_SIZE
        for start in missing:
            creation = self._creating.get(start)
            if creation is None:
                create = functools.partial(
                    MappedFile.create, self.directory, start, self.file_size,
                    sparse=True, reserve=min(self.file_size, max(0, end - start)), cache=self.cache,
                )
                creation = self._creating[start] = asyncio.ensure_future(run(create))
                creation.add_done_callback(functools.partial(self._created, start))
            await asyncio.shield(creation)
        for mf, need in self._unreserved(first_queue_offset, count):
            await run(functools.partial(mf.reserve, need))
        if self.cache is not None:
            self.cache.trim()  # files opened in the executor are parked here, on the loop

    def _created(self, start: int, creation: asyncio.Future[MappedFile]) -> None:
        """A file creation ended: the file joins the prepared ones (in start order), whether or not its
        ``prepare`` is still there to see it. A failed creation removed its file itself."""
        if self._creating.get(start) is creation:
            del self._creating[start]
        if creation.cancelled() or creation.exception() is not None:
            return
        mf = creation.result()
        if any(f.start_offset == start for f in self._ready) or self.files.find(start) is not None:
            mf.close()  # cannot happen while every creation goes through here; never keep two handles of one file
            return
        self._ready.append(mf)
        self._ready.sort(key=lambda f: f.start_offset)

    def write(self, first_queue_offset: int, units: bytes | bytearray, max_physic_end: int) -> int:
        """Write ``units`` (concatenated 20-byte units) at ``first_queue_offset``; returns units written.

        Needs ``prepare`` first. Units already present are skipped; a gap is filled with placeholders.
        """
        expected = first_queue_offset * UNIT_SIZE
        files = self.files
        last = files.last
        if last is not None and last.write_offset == expected and last.remaining >= len(units) and expected:
            last.append(units)  # the common case: appending at the end of the current file
            self.max_physic_offset = max(self.max_physic_offset, max_physic_end)
            return len(units) // UNIT_SIZE
        if files.empty:
            if not self._ready:
                raise RuntimeError(f"consume queue {self.directory} has no file; call prepare() first")
            files.append_file(self._ready.pop(0))
        first = files.first
        assert first is not None
        current = files.max_offset
        data = memoryview(units)
        if current == first.start_offset and first.wrote_position == 0 and expected != current:
            # Empty queue starting mid-way: placeholders from the file start, min offset at the first unit.
            if expected < current:
                raise RuntimeError(f"{self.directory}: unit {first_queue_offset} is before the first file")
            self._write_at_end(PLACEHOLDER * ((expected - current) // UNIT_SIZE))
            self.min_logic_offset = expected
            current = expected
        if expected < current:
            skip = current - expected
            if skip >= len(data):
                return 0
            data = data[skip:]
        elif expected > current:
            log.warning(
                "%s: unit %d written past the end %d; padding the gap with placeholders",
                self.directory,
                first_queue_offset,
                current // UNIT_SIZE,
            )
            self._write_at_end(PLACEHOLDER * ((expected - current) // UNIT_SIZE))
        self._write_at_end(data)
        self.max_physic_offset = max(self.max_physic_offset, max_physic_end)
        return len(data) // UNIT_SIZE

    async def write_units(self, first_queue_offset: int, units: bytes | bytearray, max_physic_end: int,
                          run: RunBlocking) -> None:
        """``prepare`` (only when the current file cannot take ``units`` as they come), then ``write``: the
        dispatcher's path, whose units arrive without the put path's reservation ahead of the commitlog write."""
        count = len(units) // UNIT_SIZE
        last = self.files.last
        fits = last is not None and last.room >= len(units) and self.files.max_offset == first_queue_offset * UNIT_SIZE
        if not fits and self.needs_prepare(first_queue_offset, count):
            await self.prepare(first_queue_offset, count, run)
        self.write(first_queue_offset, units, max_physic_end)

    def _write_at_end(self, data) -> None:
        files = self.files
        view = memoryview(data)
        while view:
            mf = files.last
            assert mf is not None
            if mf.full:
                if not self._ready:
                    raise RuntimeError(f"consume queue {self.directory}: file after {mf.path.name} was not prepared")
                mf = self._ready.pop(0)
                files.append_file(mf)
            n = min(len(view), mf.remaining)
            mf.append(view[:n])
            view = view[n:]

    # reading ---------------------------------------------------------------------------------------------
    def read_units(self, queue_offset: int, max_units: int) -> memoryview | None:
        """Units from ``queue_offset``, at most ``max_units``, never crossing a file end."""
        pos = queue_offset * UNIT_SIZE
        mf = self.files.find(pos)
        if mf is None or pos >= self.files.max_offset:
            return None
        rel = pos - mf.start_offset
        end = min(mf.wrote_position, rel + max_units * UNIT_SIZE)
        if end <= rel:
            return None
        return mf.view(rel, end)

    def unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        view = self.read_units(queue_offset, 1)
        return None if view is None else UNIT.unpack_from(view)

    def offset_by_time(self, timestamp_ms: int, store_time_of: Callable[[int, int], int]) -> int:
        """First queue offset whose store time >= timestamp (RocketMQ's getOffsetInQueueByTime)."""
        lo, hi = self.min_offset, self.max_offset
        if lo >= hi:
            return lo
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.unit(mid)
            ts = store_time_of(unit[0], unit[1]) if unit is not None else -1
            if ts < 0 or ts < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return min(lo, self.max_offset - 1) if lo >= self.max_offset else lo

    # maintenance -----------------------------------------------------------------------------------------
    def dirty_bytes(self) -> int:
        return self.files.max_offset - self.files.flushed_offset

    def flush_sync(self) -> None:
        self.files.flush_sync(self.files.max_offset)

    def on_commitlog_min(self, phy_min: int) -> None:
        """Cleanup's periodic call: delete files wholly below the commitlog min offset and move min_offset up.
        Nothing can change while the min offset stays where the last call saw it (new units point at new
        records), so then it reads nothing: a parked file stays parked."""
        if phy_min <= self._cleaned_for_phy_min:
            return
        self.delete_files_below(phy_min)
        self.correct_min_offset(phy_min)
        self._cleaned_for_phy_min = phy_min

    def delete_files_below(self, phy_min: int) -> int:
        """Delete whole files whose every unit points below the commitlog min offset; never the last file."""
        deleted = 0
        while len(self.files.files) > 1:
            mf = self.files.files[0]
            if not mf.full:
                break
            offset, size, _ = UNIT.unpack_from(mf.buffer, mf.file_size - UNIT_SIZE)
            if size == PLACEHOLDER_SIZE or offset + size > phy_min:
                break
            self.files.delete_first()
            deleted += 1
        if deleted:
            self.correct_min_offset(phy_min)
        return deleted

    def destroy(self) -> None:
        for mf in self._ready:
            mf.destroy()
        self._ready.clear()
        self.files.destroy()
        self.min_logic_offset = self.max_physic_offset = 0
        self._cleaned_for_phy_min = -1

    def close(self) -> None:
        for mf in self._ready:
            mf.destroy()  # never reached by a write: an empty file, not data
        self._ready.clear()
        self.files.close()
