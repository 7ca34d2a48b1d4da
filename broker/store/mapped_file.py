"""One fixed-size store file (a commitlog or consume-queue segment), named by its 20-digit start offset.

Layout: ``<dir>/<start offset, 20 digits zero-padded>``, exactly ``file_size`` bytes. Bytes ``[0, wrote_position)``
hold data; bytes after it are zero (creation and ``truncate_to`` guarantee that), so a stale record can never
reappear behind a truncated tail.

Disk blocks: a commitlog file is preallocated whole with ``posix_fallocate`` at creation, so a full disk shows up
as ENOSPC when the file is made, never as a short write later. A consume-queue file is created sparse
(``ftruncate``: no blocks) and ``reserve`` allocates blocks ahead of the writes, in steps that double with the
data written (4 KiB to 1 MiB), from the disk executor before the write that needs them: a one-message queue costs
4 KiB of disk instead of the whole 6 MB file, and ENOSPC still comes before any byte of a put is written.
``allocated_position`` is a lower bound of what is allocated (a reopened file starts at 0 and re-reserves, which
``fallocate`` answers without I/O for blocks already there). Reads of the unallocated tail see zeros.

Writes go through ``os.pwrite`` on the file descriptor (one call per batch; an I/O error is an OSError, not a
signal). Reads go through a shared read-only ``mmap`` of the whole file: ``view()`` hands out zero-copy
memoryviews (HA slices, pull responses) and the page cache keeps writes and the mapping coherent.

Positions: ``flushed_position <= wrote_position <= file_size``. ``flushed_position`` only moves after an
``fdatasync`` returned, so everything below it survives power loss.

Parking (consume-queue files only, through ``broker.store.open_files.OpenFiles``): an idle file's fd and mapping
can be closed (``park``) and are reopened by the next access, which bounds the descriptors and mappings of a
broker with thousands of queues. Parking drops this object's references instead of closing the mapping, so a
memoryview handed out earlier (a pull's units, a caller's ``buffer``) stays valid: the kernel mapping and the
mmap's own descriptor go away with the last view. Blocking calls that run in other threads (``flush_sync``,
``truncate_to``, ``reserve``) hold ``_io``, which ``park`` only try-locks, and use a temporary descriptor when the
file is parked (``fdatasync`` flushes a file's dirty pages whichever descriptor wrote them).

Task-safety: positions are owned by the event loop. ``create``, ``flush_sync``, ``truncate_to``, ``reserve`` and
``warm`` block and are meant for an executor; ``flush_sync`` may run in a thread while the loop appends
(pwrite and fdatasync on one fd are safe together). ``park`` and reopening run on the cache's owner thread (the
event loop). ``destroy`` tolerates readers still holding views: the mapping is then released when the last view
goes away.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import threading
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

NAME_DIGITS = 20
_ZERO_CHUNK = 1 << 20
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_FALLOC_FL_ZERO_RANGE = 0x10
_PAGE = 4096
RESERVE_MIN = 4096  # first reservation of a sparse file: one page (204 consume-queue units)
RESERVE_MAX = 1 << 20  # later ones follow the data written, up to this step

_libc = None
with contextlib.suppress(Exception):
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def file_name(start_offset: int) -> str:
    return f"{start_offset:0{NAME_DIGITS}d}"


def parse_file_name(name: str) -> int | None:
    return int(name) if len(name) == NAME_DIGITS and name.isascii() and name.isdigit() else None


def _fallocate(fd: int, mode: int, offset: int, length: int) -> bool:
    if _libc is None or length <= 0:
        return length <= 0
    return _libc.fallocate(fd, mode, offset, length) == 0


class FileCache(Protocol):
    """What a parkable file tells its cache (``broker.store.open_files.OpenFiles``)."""

    def opened(self, mf: MappedFile) -> None: ...

    def forget(self, mf: MappedFile) -> None: ...


class MappedFile:
    __slots__ = (
        "_io",
        "_mm",
        "_parked",
        "_view",
        "allocated_position",
        "cache",
        "fd",
        "file_size",
        "flushed_position",
        "path",
        "start_offset",
        "used",
        "wrote_position",
    )

    def __init__(
        self,
        path: Path,
        start_offset: int,
        file_size: int,
        fd: int,
        *,
        allocated: int | None = None,
        cache: FileCache | None = None,
    ) -> None:
        """``fd`` -1 with a ``cache`` makes a parked file (opened on first access)."""
        self.path = path
        self.start_offset = start_offset
        self.file_size = file_size
        self.fd = fd
        self.allocated_position = file_size if allocated is None else allocated
        self.cache = cache
        self.used = True  # the cache's reference bit: set by every access, cleared by the eviction sweep
        self._io = threading.Lock()
        self._parked = fd < 0 and cache is not None
        self._mm: mmap.mmap | None = None
        self._view: memoryview | None = None
        self.wrote_position = 0
        self.flushed_position = 0
        if fd >= 0:
            self._map()
            if cache is not None:
                cache.opened(self)

    def _map(self) -> None:
        self._mm = mmap.mmap(self.fd, self.file_size, access=mmap.ACCESS_READ)
        self._view = memoryview(self._mm)

    # creation (blocking: executor) -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: Path,
        start_offset: int,
        file_size: int,
        *,
        warm: bool = False,
        sparse: bool = False,
        reserve: int = 0,
        cache: FileCache | None = None,
    ) -> MappedFile:
        """Make a new zero-filled file: fully allocated, or ``sparse`` with ``reserve`` bytes allocated; ENOSPC
        surfaces here as OSError, an existing file as FileExistsError.

        The file is sized under a temporary name (``CREATING_SUFFIX``) and linked to its own name only once it has
        its full size, so a crash in the middle (a SIGKILL during a preallocation) never leaves a short file under
        a store name, which the next start would have to refuse; loading deletes such leftovers."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / file_name(start_offset)
        if path.exists():
            raise FileExistsError(errno.EEXIST, "store file exists", str(path))
        creating = directory / (path.name + CREATING_SUFFIX)
        fd = os.open(creating, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            if sparse:
                os.ftruncate(fd, file_size)
                allocated = _reserve_end(0, reserve, 0, file_size) if reserve > 0 else 0
                if allocated:
                    os.posix_fallocate(fd, 0, allocated)
            else:
                os.posix_fallocate(fd, 0, file_size)
                allocated = file_size
                if warm:
                    _pretouch(fd, file_size)
            os.link(creating, path)  # exclusive and atomic: FileExistsError when another creation won
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                creating.unlink()
            raise
        creating.unlink()
        return cls(path, start_offset, file_size, fd, allocated=allocated, cache=cache)

    @classmethod
    def open_existing(cls, path: Path, file_size: int, *, cache: FileCache | None = None) -> MappedFile:
        """Open a file found on disk. With a ``cache`` it only checks the size and starts parked (a broker with
        thousands of queues opens each file when it is first used, not all of them at load)."""
        start = parse_file_name(path.name)
        if start is None:
            raise ValueError(f"{path}: not a store file name (20 digits expected)")
        if cache is not None:
            _check_size(path, os.stat(path).st_size, file_size)
            return cls(path, start, file_size, -1, allocated=0, cache=cache)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            _check_size(path, os.fstat(fd).st_size, file_size)
            return cls(path, start, file_size, fd)
        except BaseException:
            os.close(fd)
            raise

    # positions -------------------------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self.start_offset + self.file_size

    @property
    def write_offset(self) -> int:
        return self.start_offset + self.wrote_position

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def room(self) -> int:
        """Bytes that can be written without allocating a block first (``remaining`` for a preallocated file)."""
        return self.allocated_position - self.wrote_position

    @property
    def parked(self) -> bool:
        return self._parked

    @property
    def closed(self) -> bool:
        """Closed for good (``close``/``destroy``); a parked file is not closed."""
        return self.fd < 0 and not self._parked

    def _reopen(self) -> None:
        """Reopen a parked file on first access (the cache's owner thread)."""
        if not self._parked:
            raise ValueError(f"{self.path} is closed")
        with self._io:
            if self.fd < 0:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
                try:
                    self._map()
                except BaseException:
                    os.close(self.fd)
                    self.fd = -1
                    raise
                self._parked = False
        if self.cache is not None:
            self.cache.opened(self)

    def park(self) -> bool:
        """Close the descriptor and drop the mapping of an idle file; the next access reopens it. False when a
        thread is using the file (``_io`` held) or it is not open. Views handed out earlier stay valid."""
        if self.fd < 0 or not self._io.acquire(blocking=False):
            return False
        try:
            fd, self.fd = self.fd, -1
            self._mm = self._view = None  # unmapped when the last outstanding view is dropped
            self._parked = True
            os.close(fd)
        finally:
            self._io.release()
        return True

    # data ------------------------------------------------------------------------------------------------
    def append(self, data) -> int:
        """Write ``data`` at the write position (one pwrite); returns the position it was written at."""
        if self.fd < 0:
            self._reopen()
        self.used = True
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            raise ValueError(f"{self.path}: {n} bytes at position {pos} would pass the file end {self.file_size}")
        done = os.pwrite(self.fd, data, pos)
        while done < n:  # short writes are legal; finish the job
            done += os.pwrite(self.fd, memoryview(data)[done:], pos + done)
        self.wrote_position = pos + n
        return pos

    def mark_full(self) -> None:
        self.wrote_position = self.file_size

    def view(self, pos: int, end: int) -> memoryview:
        if self.fd < 0:
            self._reopen()
        self.used = True
        return self._view[pos:end]

    def read(self, pos: int, size: int) -> bytes:
        if self.fd < 0:
            self._reopen()
        self.used = True
        return self._mm[pos : pos + size]

    @property
    def mapping(self) -> mmap.mmap:
        """The read-only mmap itself: unlike a memoryview it has ``find`` and slices to hashable ``bytes``
        (the dispatcher's scanner searches properties in place)."""
        if self.fd < 0:
            self._reopen()
        self.used = True
        return self._mm

    @property
    def buffer(self) -> memoryview:
        """The whole mapping (read-only)."""
        if self.fd < 0:
            self._reopen()
        self.used = True
        return self._view

    # durability (blocking: executor) ---------------------------------------------------------------------
    def flush_sync(self, upto_position: int) -> int:
        """fdatasync; afterwards everything below ``upto_position`` (read before the call) is durable."""
        with self._io:
            if self._parked:
                _with_temporary_fd(self.path, os.fdatasync)
            else:
                os.fdatasync(self.fd)
        self.flushed_position = max(self.flushed_position, upto_position)
        return self.flushed_position

    def reserve(self, upto_position: int) -> None:
        """Allocate blocks so that writes up to ``upto_position`` need none (blocking: executor); ENOSPC raises
        here, before the put writes anything. Allocates ahead in steps that follow the data written."""
        if upto_position <= self.allocated_position:
            return
        end = _reserve_end(self.allocated_position, upto_position, self.wrote_position, self.file_size)
        begin = self.allocated_position

        def allocate(fd: int) -> None:
            os.posix_fallocate(fd, begin, end - begin)

        with self._io:
            if self._parked:
                _with_temporary_fd(self.path, allocate)
            else:
                allocate(self.fd)
        self.allocated_position = max(self.allocated_position, end)

    def truncate_to(self, position: int) -> None:
        """Zero ``[position, file_size)`` keeping the blocks allocated, and move both positions back there."""
        length = self.file_size - position

        allocated = self.allocated_position

        def zero(fd: int) -> None:
            if length <= 0:
                return
            if allocated >= self.file_size:  # preallocated: zero in place and keep every block
                if _fallocate(fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, position, length):
                    return
                if _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, position, length):
                    os.posix_fallocate(fd, position, length)
                    return
            # sparse (ZERO_RANGE would allocate the holes): give the tail back, keep the reservation
            elif _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, position, length):
                if position < allocated:
                    os.posix_fallocate(fd, position, allocated - position)
                return
            _write_zeros(fd, position, length)

        with self._io:
            if self._parked:
                _with_temporary_fd(self.path, zero)
            else:
                zero(self.fd)
        self.wrote_position = position
        self.flushed_position = min(self.flushed_position, position)

    def warm(self) -> None:
        _pretouch(self.fd, self.file_size)

    # lifecycle -------------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.cache is not None:
            self.cache.forget(self)
        self._parked = False
        if self.fd < 0:
            return
        try:
            self._view.release()
            self._mm.close()
        except BufferError:
            # A reader still holds a view (an HA slice in flight); the mapping goes with its last view.
            log.debug("%s: mapping still referenced; released when the last view is dropped", self.path)
        os.close(self.fd)
        self.fd = -1

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position}, flushed={self.flushed_position})"


CREATING_SUFFIX = ".creating"  # a file being sized under its future name plus this (see MappedFile.create)


def _check_size(path: Path, actual: int, file_size: int) -> None:
    if actual != file_size:
        raise ValueError(
            f"{path} is {actual} bytes but the configured file size is {file_size}; "
            "restore the original mappedFileSize* setting or move the file away"
        )


def _reserve_end(allocated: int, upto: int, written: int, file_size: int) -> int:
    """Where a reservation for writes up to ``upto`` ends: at least one step past what is allocated, the step
    growing with the data written (so a busy queue reserves rarely and an idle one holds one page)."""
    step = min(max(written, RESERVE_MIN), RESERVE_MAX)
    end = max(upto, allocated + step)
    return min(file_size, -(-end // _PAGE) * _PAGE)


def _with_temporary_fd(path: Path, fn) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fn(fd)
    finally:
        os.close(fd)


def _write_zeros(fd: int, pos: int, length: int) -> None:
    zeros = bytes(min(_ZERO_CHUNK, length))
    end = pos + length
    while pos < end:
        pos += os.pwrite(fd, zeros[: min(len(zeros), end - pos)], pos)


def _pretouch(fd: int, size: int) -> None:
    """Bring the file's pages into the page cache now (warmMappedFileEnable, off by default as in RocketMQ).

    Reading the fallocated (unwritten, zero) extents allocates clean zero pages without disk I/O and without
    dirtying anything, so unlike RocketMQ's zero-writing warm-up there is nothing to write back or sync later.
    It buys little for pwrite appends: on the test VM a 1 GiB file took 2.5 s of CPU to pre-touch, and 64 MiB of
    32 KiB pwrites took 15 ms instead of 19 ms afterwards.
    """
    buf = bytearray(_ZERO_CHUNK)
    pos = 0
    while pos < size:
        n = os.preadv(fd, [buf], pos)
        if n <= 0:
            break
        pos += n
