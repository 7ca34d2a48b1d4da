"""ConsumeQueueStore: every consume queue of a store, by topic and queue id (RocketMQ ConsumeQueueStore).

Owns the ``topic -> queue id -> ConsumeQueue`` table of ``consumequeue/``: lookup, creation on a queue's first
write, loading at start, deletion of a topic. Every queue's files share one ``OpenFiles`` bound
(``maxOpenConsumeQueueFiles``, see ``open_files``). ``run_disk`` runs a queue's blocking preparation (file creation,
block reservation) on the store's disk executor; the put path and the dispatcher pass it to ``ConsumeQueue.prepare``.

Task-safety: event loop only, except ``load``, which startup recovery runs in the disk executor before any
service starts (``bind_owner`` then hands file parking to the loop).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from broker.store.consume_queue import ConsumeQueue, RunBlocking
from broker.store.open_files import OpenFiles


class ConsumeQueueStore:
    def __init__(self, root: Path, file_size: int, *, max_open_files: int, run_disk: RunBlocking) -> None:
        self.root = root
        self.file_size = file_size
        self.open_files = OpenFiles(max_open_files)
        self.run_disk = run_disk
        self._table: dict[str, dict[int, ConsumeQueue]] = {}

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self._table.get(topic)
        return queues.get(queue_id) if queues else None

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created (no file yet: ``prepare`` makes them) on its first write."""
        queues = self._table.get(topic)
        cq = queues.get(queue_id) if queues else None
        if cq is None:
            cq = ConsumeQueue(topic, queue_id, self.root, self.file_size, cache=self.open_files)
            self._table.setdefault(topic, {})[queue_id] = cq
        return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        for queues in self._table.values():
            yield from queues.values()

    def __len__(self) -> int:
        return sum(len(q) for q in self._table.values())

    def topics(self) -> list[str]:
        return sorted(self._table)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._table.get(topic, {}))

    def delete_topic(self, topic: str) -> None:
        for cq in self._table.pop(topic, {}).values():
            cq.destroy()
        with contextlib.suppress(OSError):
            (self.root / topic).rmdir()

    # lifecycle -------------------------------------------------------------------------------------------
    def load(self) -> None:
        """Open the table from ``<root>/<topic>/<queueId>/`` (blocking; startup recovery)."""
        self._table = {}
        if not self.root.exists():
            return
        for topic_dir in self.root.iterdir():
            if not topic_dir.is_dir():
                continue
            for qdir in topic_dir.iterdir():
                if qdir.is_dir() and qdir.name.isascii() and qdir.name.isdigit():
                    cq = ConsumeQueue(topic_dir.name, int(qdir.name), self.root, self.file_size, cache=self.open_files)
                    cq.load()
                    self._table.setdefault(topic_dir.name, {})[int(qdir.name)] = cq

    def bind_owner(self) -> None:
        """From now on files are parked on the calling thread (the event loop) only; park what loading opened."""
        self.open_files.bind_owner()
        self.open_files.trim()

    def destroy_all(self) -> None:
        """Delete every queue's files (a store whose commitlog is gone has nothing to index)."""
        for cq in self:
            cq.destroy()
        self._table = {}

    def close(self) -> None:
        for cq in self:
            cq.close()
