"""Delay-level progress: level -> next queue offset to deliver in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``.

The schedule service advances a level only after the due messages were stored under their real topic, so after
a crash it re-delivers at most the messages since the last persist (at-least-once, never lost). Persisted every
``flushDelayOffsetInterval`` to ``config/delayOffset.json``: ``{"offsetTable": {"1": 10, "2": 0}}``. Slaves copy
the master's table so a promoted slave resumes where the master stopped (spec §4 step 3) and re-delivers none of
what the master already delivered: the master pushes each level's progress within 50 ms (``merge_from_master``,
``broker/slave_notify.py``) and the slave's periodic round replaces the whole table (``replace_all``, RocketMQ's rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.metadata.config_file import ConfigFile
from remoting.headers import parse_int


class DelayOffsetManager(ConfigFile):
    def __init__(self, config_dir: str | Path, *, persist_interval_s: float = 0.0) -> None:
        super().__init__(Path(config_dir) / "delayOffset.json", persist_interval_s=persist_interval_s)
        self.table: dict[int, int] = {}

    def to_json(self) -> Any:
        return {"offsetTable": {str(level): off for level, off in sorted(self.table.items())}}

    def load_json(self, obj: Any) -> None:
        self.table = {parse_int(level): parse_int(off) for level, off in (obj.get("offsetTable") or {}).items()}

    def get(self, level: int) -> int:
        return self.table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        if self.table.get(level) != offset:
            self.table[level] = offset
            self.mark_dirty()

    def snapshot(self) -> dict[int, int]:
        return dict(self.table)

    def replace_all(self, table: dict[int, int]) -> bool:
        new = {parse_int(k): parse_int(v) for k, v in table.items()}
        if new == self.table:
            return False
        self.table = new
        self.mark_dirty()
        return True

    def merge_from_master(self, table: dict[int, int]) -> list[int]:
        """A pushed delta of the master's levels: a level only moves forward here (a push must never make a promoted
        slave re-deliver); the levels that advanced. The round's ``replace_all`` may still move one back."""
        advanced = [level for level, off in table.items() if off > self.table.get(level, -1)]
        for level in advanced:
            self.table[level] = table[level]
        if advanced:
            self.mark_dirty()
        return advanced
