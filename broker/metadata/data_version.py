"""RocketMQ's DataVersion: ``{timestamp, counter}``, bumped on every topic or subscription-group change.

Equality of both fields means "unchanged" (spec §2.6); there is no ordering. The nameserver rebuilds a master's
queue data only when the version differs, and the slave sync copies a table only when it differs, so every
change must call ``next_version()`` exactly once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from remoting.headers import parse_int


@dataclass(slots=True)
class DataVersion:
    timestamp: int = 0
    counter: int = 0

    def next_version(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def assign(self, other: DataVersion) -> None:
        self.timestamp = other.timestamp
        self.counter = other.counter

    def copy(self) -> DataVersion:
        return DataVersion(self.timestamp, self.counter)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        if not isinstance(obj, dict):
            return cls()
        return cls(timestamp=parse_int(obj.get("timestamp", 0)), counter=parse_int(obj.get("counter", 0)))
