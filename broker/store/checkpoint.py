"""The store directory's markers: ``checkpoint`` (4096 bytes), ``abort`` (present while running) and ``lock``.

Layout (big-endian, the rest of the 4096 bytes is zero):

    off 0   i64  physicMsgTimestamp   store timestamp of the last commitlog record known flushed
                                       (slave: last dispatched)
    off 8   i64  logicsMsgTimestamp   store timestamp of the last record put into a consume queue and flushed
    off 16  i64  indexMsgTimestamp    last index flush (kept for layout compatibility; 0 here)

``min_timestamp = max(0, min(physic, logics) - 3000)``: abnormal recovery starts from the newest commitlog
file whose first record is older than that, so everything newer is re-dispatched.

Crash behaviour: ``flush`` pwrites the whole 4096-byte page and fdatasyncs; a 24-byte write inside one page
cannot tear on the filesystems we run on, and a zeroed or missing file only makes recovery start earlier.
The abort marker exists while the store runs; finding it at start means the last exit was a crash.

Locks: every directory the broker writes holds a ``broker.lock`` file with an exclusive ``flock`` while the store runs
(``StoreLocks``): the store root (checkpoint, abort, and by default everything below), the commitlog directory
(``storePathCommitLog`` may point anywhere, even at another broker's commitlog), the consume-queue directory and
the config directory (topics, offsets, groups). Every lock file has the same name, so a second broker is refused
whichever of its directories coincides with one of the first broker's, and the file says who holds it (pid and
store root), which the refusal names. ``flock`` is per open file, so even a second store in the same process is
refused; the kernel drops it when the process dies, so a crash never leaves a stale lock.

Task-safety: the setters are plain attribute writes from the event loop; ``flush`` blocks (executor).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from pathlib import Path

from common.errors import PyrmqError
from common.persist import fsync_dir

FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        data = os.pread(self._fd, _LAYOUT.size, 0)
        if len(data) == _LAYOUT.size:
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _LAYOUT.unpack(data)

    @property
    def min_timestamp(self) -> int:
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def flush(self) -> None:
        page = bytearray(FILE_SIZE)
        _LAYOUT.pack_into(page, 0, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp)
        os.pwrite(self._fd, page, 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class AbortMarker:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.fsync(fd)
        os.close(fd)
        fsync_dir(self.path.parent)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        fsync_dir(self.path.parent)


class StoreLockedError(PyrmqError):
    """Another broker process (or store object) holds the store directory."""


LOCK_FILE = "broker.lock"  # a "." cannot be in a topic name, so it never collides with consumequeue/<topic>
_HOLDER_MAX_BYTES = 4096


class StoreLock:
    """An exclusive ``flock`` on one ``lock`` file; the file names the holder (``pid=<pid> store=<root>``)."""

    def __init__(self, path: Path, *, owner: str = "") -> None:
        self.path = path
        self.owner = owner  # the store root, written into the file for the refusal message
        self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise StoreLockedError(
                    f"{self.path.parent} belongs to another running broker: its lock {self.path} is held by {holder}",
                    hint="stop that broker, or give this one its own storePathRootDir and storePathCommitLog",
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} store={self.owner or self.path.parent}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _read_holder(fd: int) -> str:
    """What the holder wrote into its lock file, for the refusal (it writes right after taking the lock, so an
    empty file means it is just starting)."""
    try:
        text = os.pread(fd, _HOLDER_MAX_BYTES, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "a process that is starting (no pid written yet)"


class StoreLocks:
    """The locks of every directory a broker writes, taken in order and released together.

    Directories that are the same after resolving symlinks are locked once (a second ``flock`` from this process
    on the same file would refuse this very store). Taking them is all or nothing: a refusal releases the locks
    already taken.
    """

    def __init__(self, directories: list[Path], *, owner: str) -> None:
        seen: dict[Path, StoreLock] = {}
        for directory in directories:
            key = directory.expanduser().resolve()
            if key not in seen:
                seen[key] = StoreLock(directory / LOCK_FILE, owner=owner)
        self.locks = list(seen.values())

    @property
    def held(self) -> bool:
        return any(lock.held for lock in self.locks)

    @property
    def paths(self) -> list[Path]:
        return [lock.path for lock in self.locks]

    def acquire(self) -> None:
        taken = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()
