"""CommitLog: every message of the broker, appended to one log of fixed-size files (RocketMQ CommitLog).

Files: ``<storePathCommitLog>/<20-digit start offset>``, ``mappedFileSizeCommitLog`` bytes each, holding
records in the v1 layout of ``record.py``. A batch is appended with one pwrite when it fits the current file
with 8 bytes to spare; otherwise the file is closed with an 8-byte BLANK record (``[i32 remaining][i32
0xCBD43194]``, the rest of the file counting as written) and the batch goes to the next file. A batch larger
than a whole file is written in chunks of whole records, each chunk one pwrite. So every file ends with a
BLANK or is the last file, and a record never crosses a file end.

Invariants: ``min_offset <= flushed_offset <= max_offset``; each record's PHYSICALOFFSET field equals its
position; after any append a file has 0 or >= 8 bytes left.

Crash behaviour: ``recover`` scans from a start file (the third-to-last after a clean stop, an earlier one
chosen by the checkpoint after a crash), follows BLANK records into the next file and stops at the first record
that is not VALID (torn tail, zeros, garbage, CRC mismatch under ``checkCRCOnRecover``, or a PHYSICALOFFSET
that does not match its position). Everything after that point is zeroed and later files are deleted, so the
log ends exactly at the last good record and a stale record can never reappear.

Task-safety: event-loop owned. The put lock is held by the caller (``put.append_batch``) across
``acquire_next_files`` + encode + ``roll``/append; the replicated path (``append_replicated``) is synchronous.
Flushes run in the executor concurrently with appends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from broker.store.allocate import AllocateService
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.types import CommitlogSlice, StoreOffsetMismatch
from remoting.message_codec import DEFAULT_MAX_RECORD_SIZE, RecordStatus, blank_record, check_record

log = logging.getLogger(__name__)


class CommitLog:
    def __init__(
        self,
        directory: Path,
        file_size: int,
        allocator: AllocateService,
        *,
        warm: bool = False,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files = MappedFileQueue(directory, file_size)
        self.allocator = allocator
        self.warm = warm
        self.max_record_size = max_record_size
        self.last_store_timestamp = 0  # store time of the newest record (for the checkpoint)

    # offsets ---------------------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.files.flushed_offset

    # loading and recovery (blocking: executor) -----------------------------------------------------------
    def load(self) -> None:
        self.files.load()

    def recover(self, start_index: int, *, check_crc: bool) -> int:
        """Scan from file ``start_index``, cut the log after the last valid record; returns the new end."""
        files = self.files.files
        if not files:
            return 0
        end = files[start_index].start_offset
        for mf in files[start_index:]:
            pos, done = self._scan_file(mf, check_crc)
            end = mf.start_offset + pos
            if not done:
                break
        removed = self.files.truncate_to(end)
        for mf in removed:
            log.info("recovery deleted %s (after the last valid record at %d)", mf.path, end)
        self.files.set_flushed(end)
        return end

    def _scan_file(self, mf: MappedFile, check_crc: bool) -> tuple[int, bool]:
        """(position after the last valid record, True if the scan ran into a BLANK, i.e. continues)."""
        buf, pos, base = mf.buffer, 0, mf.start_offset
        while pos < self.file_size:
            res = check_record(buf, pos, check_crc=check_crc, max_size=self.max_record_size)
            if res.status is RecordStatus.VALID:
                if res.info.physical_offset != base + pos:  # type: ignore[union-attr]
                    log.warning(
                        "%s: record at %d claims offset %d; cutting here", mf.path, base + pos, res.info.physical_offset
                    )  # type: ignore[union-attr]
                    return pos, False
                self.last_store_timestamp = res.info.store_timestamp  # type: ignore[union-attr]
                pos += res.size
            elif res.status is RecordStatus.BLANK and pos + res.size == self.file_size:
                return self.file_size, True
            else:
                if pos or res.reason != "magic code 0x00000000":
                    log.info("%s: recovery stops at %d: %s", mf.path, base + pos, res.reason or res.status.value)
                return pos, False
        return pos, True

    def abnormal_start_index(self, min_timestamp: int) -> int:
        """The newest file whose first record is older than the checkpoint (RocketMQ isMappedFileMatchedRecover)."""
        for i in range(len(self.files.files) - 1, -1, -1):
            res = check_record(self.files.files[i].buffer, 0)
            if res.status is RecordStatus.VALID and 0 < res.info.store_timestamp <= min_timestamp:  # type: ignore
                return i
        return 0

    def normal_start_index(self) -> int:
        """Third file from the newest one holding data (files created for a batch that never came are skipped)."""
        files = self.files.files
        newest = len(files) - 1
        while newest > 0 and files[newest].buffer[:8] == bytes(8):
            newest -= 1
        return max(0, newest - 2)

    # appending -------------------------------------------------------------------------------------------
    async def acquire_next_files(self, count: int) -> list[MappedFile]:
        """Create the next ``count`` files (executor) without adding them: a failure leaves the log untouched."""
        out: list[MappedFile] = []
        start = self.files.next_start()
        try:
            for i in range(count):
                out.append(
                    await self.allocator.get(self.directory, start + i * self.file_size, self.file_size, warm=self.warm)
                )
        except BaseException:
            for mf in out:
                mf.destroy()
            raise
        return out

    def roll(self, new: MappedFile, *, prefetch: bool = True) -> MappedFile:
        """Close the current file with a BLANK record and continue in ``new``."""
        mf = self.files.last
        if mf is not None and not mf.full:
            mf.append(blank_record(mf.remaining))
            mf.mark_full()
        self._add_file(new, prefetch=prefetch)
        return new

    def _add_file(self, mf: MappedFile, *, prefetch: bool = True) -> None:
        if self.files.empty:
            self.files.set_flushed(mf.start_offset)
        self.files.append_file(mf)
        if prefetch:
            self.allocator.prefetch(self.directory, mf.end_offset, self.file_size, warm=self.warm)

    def append_replicated(self, phy_offset: int, data) -> int:
        """Raw bytes from the master at ``phy_offset`` (== max_offset, checked by the caller); new max offset."""
        n = len(data)
        if self.files.empty:
            start = phy_offset - phy_offset % self.file_size
            if phy_offset != start:
                raise StoreOffsetMismatch(
                    start,
                    phy_offset,
                    path=f"{self.directory}: an empty commitlog starts at a file boundary (file size {self.file_size})",
                )
            self._add_file(self.allocator.take_now(self.directory, start, self.file_size))
        mf = self.files.last
        assert mf is not None
        if mf.full:
            self._add_file(self.allocator.take_now(self.directory, mf.end_offset, self.file_size))
            mf = self.files.last
            assert mf is not None
        if n > mf.remaining:
            raise ValueError(
                f"replicated chunk of {n} bytes at {phy_offset} crosses the end of {mf.path.name} "
                f"({mf.remaining} bytes left); the master must split chunks at file ends"
            )
        mf.append(data)
        return self.files.max_offset

    # reading ---------------------------------------------------------------------------------------------
    def read(self, phy_offset: int, size: int) -> bytes | None:
        mf = self.files.find(phy_offset)
        if mf is None:
            return None
        pos = phy_offset - mf.start_offset
        if pos + size > mf.wrote_position:
            return None
        return mf.read(pos, size)

    def view_at(self, phy_offset: int) -> tuple[MappedFile, int] | None:
        mf = self.files.find(phy_offset)
        if mf is None or phy_offset >= mf.write_offset:
            return None
        return mf, phy_offset - mf.start_offset

    def start_at_time(self, timestamp_ms: int) -> int:
        """Start of the newest file whose first record is stored at or before ``timestamp_ms`` (the min offset when
        none is): a scan from there sees every record newer than that time."""
        files = self.files.files
        if not files:
            return self.min_offset
        return max(files[self.abnormal_start_index(timestamp_ms)].start_offset, self.min_offset)

    def slice(self, phy_offset: int, max_bytes: int) -> CommitlogSlice | None:
        """Up to ``max_bytes`` written bytes from ``phy_offset``, never past its file's end (what HA sends)."""
        if phy_offset >= self.max_offset or phy_offset < self.min_offset or max_bytes <= 0:
            return None
        mf = self.files.find(phy_offset)
        if mf is None:
            return None
        pos = phy_offset - mf.start_offset
        end = min(pos + max_bytes, mf.wrote_position)
        if end <= pos:
            return None
        return CommitlogSlice(mf.fd, pos, end - pos, phy_offset, mf.view(pos, end))

    def iter_records(self, begin: int, end: int) -> Iterator[tuple[int, object]]:
        """(offset, CheckResult) for each record in [begin, end), following BLANKs; stops at non-VALID."""
        offset = begin
        while offset < end:
            found = self.view_at(offset)
            if found is None:
                return
            mf, pos = found
            limit = min(mf.wrote_position, end - mf.start_offset)
            buf = mf.buffer[:limit]
            res = check_record(buf, pos, max_size=self.max_record_size)
            if res.status is RecordStatus.BLANK:
                offset = mf.end_offset
                continue
            yield offset, res
            if res.status is not RecordStatus.VALID:
                return
            offset += res.size

    # maintenance -----------------------------------------------------------------------------------------
    def close(self) -> None:
        self.files.close()
