"""An ordered run of equal-size MappedFiles in one directory: a log seen as one endless byte stream.

Invariants: files are sorted by start offset, each file starts where the previous one ends
(``start[i+1] == start[i] + file_size``), every file but the last is full, and ``min_offset <= flushed_offset
<= max_offset``. An offset ``o`` lives in the file starting at ``o - o % file_size``.

Crash behaviour: ``load`` only opens what is on disk and checks sizes and contiguity (a hole in the sequence is
an error naming both files; it is never papered over). Write positions are set by the owner's recovery scan
(``set_positions`` / ``truncate_to``), which also deletes files after the recovered end.

Consume-queue runs pass a ``cache`` (``open_files.OpenFiles``): their files are loaded parked and opened when used,
so loading thousands of queues opens no file at all.

Task-safety: owned by the event loop; the blocking calls (``flush_sync``, ``truncate_to`` and ``load``) may
run in an executor while no append is in flight, except ``flush_sync`` which is safe concurrently with appends.
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path

from broker.store.checkpoint import LOCK_FILE
from broker.store.mapped_file import CREATING_SUFFIX, FileCache, MappedFile, parse_file_name

log = logging.getLogger(__name__)


class MappedFileQueue:
    def __init__(self, directory: Path, file_size: int, *, cache: FileCache | None = None) -> None:
        self.directory = directory
        self.file_size = file_size
        self.cache = cache
        self.files: list[MappedFile] = []
        self._starts: list[int] = []
        self._flushed_offset = 0

    # loading ---------------------------------------------------------------------------------------------
    def load(self) -> None:
        """Open every file of the directory (blocking). Wrong sizes or a gap in the sequence raise ValueError."""
        if not self.directory.exists():
            return
        paths = []
        for entry in os.scandir(self.directory):
            start = parse_file_name(entry.name)
            if start is None:
                if entry.name.endswith(CREATING_SUFFIX) and entry.is_file():
                    # a creation a crash interrupted: it never held data (its own name is linked only once sized)
                    log.info("%s: removing %s (a file creation a crash interrupted)", self.directory, entry.name)
                    os.unlink(entry.path)
                elif entry.is_file() and entry.name != LOCK_FILE:
                    log.warning("%s: ignoring %s (not a store file name)", self.directory, entry.name)
                continue
            paths.append((start, Path(entry.path)))
        paths.sort()
        prev = None
        for start, path in paths:
            if start % self.file_size:
                raise ValueError(f"{path}: start offset {start} is not a multiple of the file size {self.file_size}")
            if prev is not None and start != prev + self.file_size:
                raise ValueError(
                    f"{self.directory}: gap between {prev:020d} and {start:020d}; a file is missing. "
                    "Restore it, or move the files before the gap away to keep the newer data"
                )
            prev = start
        for _, path in paths:
            mf = MappedFile.open_existing(path, self.file_size, cache=self.cache)
            mf.wrote_position = mf.flushed_position = self.file_size  # recovery moves the last ones back
            self._add(mf)
        if self.files:
            self._flushed_offset = self.max_offset

    def _add(self, mf: MappedFile) -> None:
        if self.files and mf.start_offset != self.files[-1].end_offset:
            raise ValueError(f"{mf.path}: expected a file at {self.files[-1].end_offset}, got {mf.start_offset}")
        self.files.append(mf)
        self._starts.append(mf.start_offset)

    def append_file(self, mf: MappedFile) -> None:
        self._add(mf)

    # lookups ---------------------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        return not self.files

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def min_offset(self) -> int:
        return self.files[0].start_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        return self.files[-1].write_offset if self.files else 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset`` (None outside the files)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        mf = self.files[i]
        return mf if offset < mf.end_offset else None

    def next_start(self) -> int:
        return self.files[-1].end_offset if self.files else 0

    # durability ------------------------------------------------------------------------------------------
    def flush_sync(self, upto_offset: int) -> int:
        """fdatasync every file holding bytes in [flushed, upto_offset) (blocking); returns the new flushed offset."""
        start = self._flushed_offset
        if upto_offset <= start:
            return start
        for mf in list(self.files):
            if mf.end_offset <= start or mf.start_offset >= upto_offset:
                continue
            if not mf.closed:
                mf.flush_sync(min(upto_offset, mf.end_offset) - mf.start_offset)
        self._flushed_offset = max(self._flushed_offset, upto_offset)
        return self._flushed_offset

    def set_flushed(self, offset: int) -> None:
        self._flushed_offset = offset

    # truncation and deletion -----------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> list[MappedFile]:
        """Drop everything at or after ``offset`` (blocking): later files are deleted, the tail zeroed."""
        removed = []
        while self.files and self.files[-1].start_offset > offset:
            mf = self.files.pop()
            self._starts.pop()
            mf.destroy()
            removed.append(mf)
        # An offset exactly at a file end leaves that file full: the next append rolls to a new file.
        if self.files:
            last = self.files[-1]
            pos = min(offset - last.start_offset, self.file_size)
            if pos < last.wrote_position or pos < self.file_size:
                last.truncate_to(pos)
        self._flushed_offset = min(self._flushed_offset, offset)
        return removed

    def delete_first(self) -> MappedFile:
        mf = self.files.pop(0)
        self._starts.pop(0)
        mf.destroy()
        return mf

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files.clear()
        self._starts.clear()
        self._flushed_offset = 0
        try:
            self.directory.rmdir()
        except OSError:
            pass

    def close(self) -> None:
        for mf in self.files:
            mf.close()
