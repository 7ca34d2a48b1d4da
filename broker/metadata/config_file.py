"""Shared persistence for the metadata managers: one JSON file under ``<root>/config``, written in batches off the loop.

Every change marks the table dirty (``mark_dirty``, O(1)); ``common.persist.BatchedJsonWriter`` writes it at most
once per the manager's interval (``flushMetadataInterval`` for topics and groups, ``flushConsumerOffsetInterval``,
``flushDelayOffsetInterval``): at once after a quiet period, else when the interval has passed, with every change in
between sharing that write. ``persist()`` waits for the write in progress only, not for the interval. The loop only
copies the table's dict (``file_snapshot``); building the JSON object, serialising and the tmp + fsync + rename +
.bak of ``common.persist`` run in a worker thread.

What a crash (SIGKILL, power loss) between a change and the next write loses, and why that is acceptable:
- an explicit admin change (updateSubGroup, deleteSubGroup; PUT_KV_CONFIG on the nameserver) awaits ``persist()``
  before it answers, and so does the first send to a topic it auto-created (RocketMQ persisted both before
  answering), so nothing a tool was told is saved, and no acknowledged message's topic, is lost (concurrent ones
  share one write);
- an auto-created group or retry topic, a consumer offset commit or a delay offset from the last interval: a group
  or a retry topic is created again by the client's next heartbeat or pull, a consumer re-reads from the previous
  committed offset and the schedule service re-delivers (at-least-once, as RocketMQ's own periodic persistence);
- a graceful stop writes everything (``close``).
Loading falls back to ``.bak`` when the main file is missing, empty or damaged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.persist import BatchedJsonWriter, Render, read_json, write_json_atomic


class ConfigFile:
    def __init__(self, path: str | Path, *, persist_interval_s: float = 0.0) -> None:
        self.path = Path(path)
        self.writer = BatchedJsonWriter(self.path, self.file_snapshot, min_interval_s=persist_interval_s)
        # called on every change, on the loop (a master's push to its slaves, ``broker.slave_notify``); keep them O(1)
        self.change_listeners: list[Callable[[], None]] = []

    # subclasses ---------------------------------------------------------------------------------------------
    def to_json(self) -> Any:
        """The table in its RocketMQ shape (the slave sync's body too)."""
        raise NotImplementedError

    def load_json(self, obj: Any) -> None:
        raise NotImplementedError

    def file_snapshot(self) -> Render:
        """On the loop: a cheap copy of the table; the returned function builds the file's JSON in a worker thread.
        The default serialises on the loop; managers whose tables grow at a peer's will override it."""
        obj = self.to_json()
        return lambda: obj

    # shared -------------------------------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        return self.writer.dirty

    @property
    def persist_interval_s(self) -> float:
        return self.writer.min_interval_s

    @persist_interval_s.setter
    def persist_interval_s(self, seconds: float) -> None:
        self.writer.min_interval_s = max(0.0, seconds)

    def load(self) -> bool:
        """Load the file (or its .bak); False when neither exists, leaving the defaults in place."""
        obj = read_json(self.path)
        if obj is None:
            return False
        self.load_json(obj)
        self.writer.written_externally()
        return True

    def mark_dirty(self) -> None:
        """A change: the file is written within the persist interval (or at once after a quiet period)."""
        self.writer.changed()
        for listener in self.change_listeners:
            listener()

    async def persist(self, *, force: bool = False) -> None:
        """Return once every change so far is on disk (sharing the next batched write); ``force`` writes even
        an unchanged table. Raises OSError when the write failed."""
        if force and not self.dirty:
            self.writer.changed()
        await self.writer.flush()

    async def close(self) -> None:
        """Graceful stop: write what is pending now, whatever the interval."""
        await self.writer.close()

    def persist_now(self) -> None:
        """Blocking write, for tests and for the last flush when no loop is running."""
        write_json_atomic(self.path, self.file_snapshot()())
        self.writer.written_externally()
