"""Shared persistence for the metadata managers: one JSON file under ``<root>/config``, written off the loop.

The table is serialised on the event loop (a consistent snapshot: managers are only mutated there), then the
blocking write (tmp + fsync + rename + .bak, ``common.persist``) runs in a worker thread. One lock per file keeps
two writers from racing on the same ``.tmp``. A ``dirty`` flag lets the periodic flush skip unchanged tables.
Loading falls back to ``.bak`` when the main file is missing, empty or damaged.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from common.persist import read_json, write_json_atomic

log = logging.getLogger(__name__)


class ConfigFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.dirty = False
        self._lock: asyncio.Lock | None = None

    # subclasses ---------------------------------------------------------------------------------------------
    def to_json(self) -> Any:
        raise NotImplementedError

    def load_json(self, obj: Any) -> None:
        raise NotImplementedError

    # shared -------------------------------------------------------------------------------------------------
    def load(self) -> bool:
        """Load the file (or its .bak); False when neither exists, leaving the defaults in place."""
        obj = read_json(self.path)
        if obj is None:
            return False
        self.load_json(obj)
        self.dirty = False
        return True

    def mark_dirty(self) -> None:
        self.dirty = True

    async def persist(self, *, force: bool = False) -> None:
        if not (self.dirty or force):
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            obj = self.to_json()
            self.dirty = False
            try:
                await asyncio.to_thread(write_json_atomic, self.path, obj)
            except BaseException:
                self.dirty = True
                raise

    def persist_now(self) -> None:
        """Blocking write, for tests and for the last flush when no loop is running."""
        write_json_atomic(self.path, self.to_json())
        self.dirty = False
