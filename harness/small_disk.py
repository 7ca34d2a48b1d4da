"""A small filesystem for one broker's store, and a way to fill it up and free it again ("disk full").

A tmpfs of ``size_bytes`` is mounted on the store directory before the broker starts. ``fill()`` allocates one
filler file over all the space that is left (posix_fallocate, so it costs no writes), leaving the broker with a
full disk: creating its next commitlog or consume-queue file fails with ENOSPC (the store allocates files whole
at creation, so a full disk is never a SIGBUS in a mapping). ``free()`` deletes the filler: a broker that handles
a full disk well resumes without a restart (spec/reliability.md §5.3 C7). ``unmount()`` lazily detaches the
filesystem, even while a process still has files open on it.

Needs root (mount); ``unavailable()`` tries a real mount and says why it cannot.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

FILLER = ".disk-full-filler"


def _mount_tmpfs(path: Path, size_bytes: int) -> None:
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False, timeout=30)
    if proc.returncode != 0:
        raise OSError(f"mount -t tmpfs on {path} failed: {(proc.stderr or proc.stdout).strip()}")


def unavailable() -> str | None:
    """Why a small filesystem cannot be mounted here (None: it can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    with tempfile.TemporaryDirectory(prefix="pyrmq-mount-probe-") as tmp:
        try:
            _mount_tmpfs(Path(tmp), 1024 * 1024)
        except OSError as exc:
            return str(exc)
        subprocess.run(["umount", "-l", tmp], capture_output=True, check=False)
    return None


class SmallDisk:
    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        _mount_tmpfs(self.path, self.size_bytes)
        self.mounted = True
        return self

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Take all free space; returns the bytes taken."""
        free = self.free_bytes()
        fd = os.open(self.path / FILLER, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            taken = 0
            step = free
            while step >= 4096:  # the last blocks may not be allocatable in one piece
                try:
                    os.posix_fallocate(fd, taken, step)
                    taken += step
                except OSError:
                    step //= 2
            return taken
        finally:
            os.close(fd)

    def free(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)
            self.mounted = False
