"""OpenFiles: a bound on the consume-queue files a broker keeps open (descriptor + mapping each).

Every consume-queue file that is open costs two descriptors (the file's and the mmap's own duplicate) and a
mapping; 2,000 one-message topics held 4,000 descriptors. The store gives every consume queue this one cache:
a file registers when it opens, and past ``limit`` open files the least recently used ones are parked
(``MappedFile.park``: descriptor closed, mapping dropped) and reopened by their next access.

Eviction is CLOCK (second chance): an access only sets the file's ``used`` bit (one attribute store on the hot
path); the sweep clears set bits and parks the first file found clear. A file a thread is using (its ``_io``
lock held: flush, reserve, truncate) is skipped, and so is the file being opened.

Parking is safe for readers: views handed out earlier keep the mapping alive (see ``mapped_file``), and the
zero-copy pull path returns views of the commitlog, which is never parked.

Task-safety: ``opened`` may be called from any thread (recovery and file creation run in the disk executor),
but files are parked only on the owner thread (the event loop, ``bind_owner``) or, before ``bind_owner``, by
whoever opens (startup recovery, when nothing else touches the queues). Registrations from other threads wait
for the owner's next ``trim``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.store.mapped_file import MappedFile


class OpenFiles:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"OpenFiles limit must be at least 1, got {limit}")
        self.limit = limit
        self._open: OrderedDict[int, MappedFile] = OrderedDict()  # id -> file, oldest first
        self._lock = threading.Lock()
        self._owner: int | None = None
        self.parked_total = 0
        self.opened_total = 0

    def __len__(self) -> int:
        return len(self._open)

    def bind_owner(self) -> None:
        """From now on only the calling thread (the event loop) parks files."""
        self._owner = threading.get_ident()

    def opened(self, mf: MappedFile) -> None:
        with self._lock:
            self._open[id(mf)] = mf
            self._open.move_to_end(id(mf))
            self.opened_total += 1
        if self._owner is None or self._owner == threading.get_ident():
            self.trim(keep=mf)

    def forget(self, mf: MappedFile) -> None:
        with self._lock:
            self._open.pop(id(mf), None)

    def trim(self, keep: MappedFile | None = None) -> int:
        """Park files until at most ``limit`` are open; returns how many were parked."""
        if len(self._open) <= self.limit:
            return 0
        parked = 0
        with self._lock:
            budget = 2 * len(self._open) + 1  # one full sweep clears every bit; the second finds a victim
            while len(self._open) > self.limit and budget > 0:
                budget -= 1
                key, mf = next(iter(self._open.items()))
                if mf is keep or mf.used:
                    mf.used = mf is keep
                    self._open.move_to_end(key)
                elif mf.park():
                    del self._open[key]
                    parked += 1
                elif mf.fd < 0:
                    del self._open[key]  # closed meanwhile
                else:
                    self._open.move_to_end(key)  # busy in a thread: try the next one
            self.parked_total += parked
        return parked
