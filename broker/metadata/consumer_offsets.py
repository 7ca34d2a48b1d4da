"""ConsumerOffsetManager: committed consume progress per ``topic@group`` and queue, plus a reset version per key.

Commits from consumers overwrite (a smaller value is accepted and logged, as RocketMQ does: a consumer may rewind
on purpose). Metadata sync between master and slave is different: RocketMQ's slave copied the master's table
blindly, so a master that came back with a stale file rolled every consumer back (issue #1094). Here both
directions merge per queue and the larger offset wins, unless the incoming entry carries a newer
``reset_version`` (an explicit offset reset on the other node), in which case the incoming entry replaces the
local one. An entry with an older reset version than ours is ignored. So an offset only ever moves back by an
explicit reset.

File ``config/consumerOffset.json``::

    {"offsetTable": {"T@G": {"0": 123, "1": 77}}, "resetVersion": {"T@G": 1700000000000}}

Owned by the event loop; not thread-safe. Written at most once per ``flushConsumerOffsetInterval`` (RocketMQ's
schedule), and at stop: a crash loses the commits of the last interval, and consumers re-read from the previous
commit (at-least-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from broker.metadata.config_file import ConfigFile
from common.persist import Render
from remoting.headers import parse_int

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_key(key: str) -> tuple[str, str]:
    topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
    return topic, group


class ConsumerOffsetManager(ConfigFile):
    def __init__(self, config_dir: str | Path, *, persist_interval_s: float = 0.0) -> None:
        super().__init__(Path(config_dir) / "consumerOffset.json", persist_interval_s=persist_interval_s)
        self.table: dict[str, dict[int, int]] = {}
        self.reset_versions: dict[str, int] = {}
        # keys changed since the master last told its slaves (``broker.slave_notify``); None while nobody listens.
        # Bounded by the table: a set of its keys.
        self.changed_keys: set[str] | None = None

    # persistence --------------------------------------------------------------------------------------------
    def to_json(self) -> Any:
        return {
            "offsetTable": {key: {str(q): off for q, off in sorted(qs.items())} for key, qs in self.table.items()},
            "resetVersion": dict(self.reset_versions),
        }

    def file_snapshot(self) -> Render:
        table, versions = {key: qs.copy() for key, qs in self.table.items()}, dict(self.reset_versions)
        return lambda: {
            "offsetTable": {key: {str(q): off for q, off in sorted(qs.items())} for key, qs in table.items()},
            "resetVersion": versions,
        }

    def load_json(self, obj: Any) -> None:
        self.table = {
            key: {parse_int(q): parse_int(off) for q, off in qs.items()}
            for key, qs in (obj.get("offsetTable") or {}).items()
        }
        self.reset_versions = {key: parse_int(v) for key, v in (obj.get("resetVersion") or {}).items()}

    # consumer commits and queries ---------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = offset_key(topic, group)
        queues = self.table.setdefault(key, {})
        previous = queues.get(queue_id)
        if previous == offset:
            return
        if previous is not None and offset < previous:
            log.warning(
                "offset of %s queue %d moves back from %d to %d (consumer commit)", key, queue_id, previous, offset
            )
        queues[queue_id] = offset
        if self.changed_keys is not None:
            self.changed_keys.add(key)
        self.mark_dirty()

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self.table.get(offset_key(topic, group))
        return None if queues is None else queues.get(queue_id)

    def reset(self, group: str, topic: str, offsets: Mapping[int, int]) -> int:
        """Explicit reset (operator or tool): replaces the entry and bumps its reset version, which wins merges."""
        key = offset_key(topic, group)
        version = max(self.reset_versions.get(key, 0) + 1, int(time.time() * 1000))
        self.table[key] = dict(offsets)
        self.reset_versions[key] = version
        if self.changed_keys is not None:
            self.changed_keys.add(key)
        self.mark_dirty()
        return version

    def queues_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(offset_key(topic, group), {}))

    def topics_of_group(self, group: str) -> list[str]:
        return sorted(t for t, g in map(split_key, self.table) if g == group)

    def remove_group(self, group: str) -> int:
        return self._remove(lambda topic, g: g == group)

    def remove_topic(self, topic: str) -> int:
        return self._remove(lambda t, group: t == topic)

    def _remove(self, match) -> int:
        doomed = [key for key in self.table if match(*split_key(key))]
        for key in doomed:
            del self.table[key]
            self.reset_versions.pop(key, None)
        if doomed:
            self.mark_dirty()
        return len(doomed)

    # metadata sync ------------------------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
        return {key: dict(qs) for key, qs in self.table.items()}, dict(self.reset_versions)

    def entries(self, keys: Iterable[str]) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
        """The current offsets and reset versions of ``keys`` (those still in the table)."""
        table = {key: dict(self.table[key]) for key in keys if key in self.table}
        return table, {key: self.reset_versions[key] for key in table if key in self.reset_versions}

    def merge_from_master(self, table: Mapping[str, Mapping[int, int]], reset_versions: Mapping[str, int]) -> set[str]:
        """Slave side of the sync; returns the keys whose offsets changed here."""
        return self._merge(table, reset_versions)

    def merge_from_slave(self, table: Mapping[str, Mapping[int, int]], reset_versions: Mapping[str, int]) -> set[str]:
        """A restarted master takes what its slave accepted while it was down; same rule as the other direction."""
        return self._merge(table, reset_versions)

    def _merge(self, table: Mapping[str, Mapping[int, int]], reset_versions: Mapping[str, int]) -> set[str]:
        changed: set[str] = set()
        versions_adopted = False
        for key, incoming in table.items():
            theirs = parse_int(reset_versions.get(key, 0))
            ours = self.reset_versions.get(key, 0)
            local = self.table.get(key)
            if theirs > ours:
                new = {parse_int(q): parse_int(o) for q, o in incoming.items()}
                self.reset_versions[key] = theirs
                versions_adopted = True
                if new != local:
                    self.table[key] = new
                    changed.add(key)
                continue
            if theirs < ours:
                continue  # our entry was reset after theirs was written: theirs is history
            if local is None:
                local = self.table[key] = {}
            for q, off in incoming.items():
                q, off = parse_int(q), parse_int(off)
                if off > local.get(q, -1):
                    local[q] = off
                    changed.add(key)
            if not local:
                del self.table[key]
        if changed or versions_adopted:
            if self.changed_keys is not None:
                self.changed_keys.update(key for key in table if key in self.table)
            self.mark_dirty()
        return changed

    def keys(self) -> Iterable[str]:
        return self.table.keys()
