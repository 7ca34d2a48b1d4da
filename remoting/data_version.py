"""RocketMQ's DataVersion: ``{timestamp, counter, stateVersion}``, the version of a broker's topic or subscription
group table, one definition for the broker (which bumps it), the nameserver and the SDK (which compare it).

Equality of timestamp and counter means "unchanged" (spec §2.6); there is no ordering. The nameserver rebuilds a
master's queue data only when the version differs, and the slave sync copies a table only when it differs, so every
change must call ``next_version()`` exactly once. ``state_version`` (RocketMQ 5's master epoch) is carried for
display only and takes no part in the comparison; pyrmq brokers send 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from remoting.headers import parse_int


@dataclass(slots=True)
class DataVersion:
    timestamp: int = 0
    counter: int = 0
    state_version: int = field(default=0, compare=False)

    def next_version(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def assign(self, other: DataVersion) -> None:
        self.timestamp = other.timestamp
        self.counter = other.counter

    def copy(self) -> DataVersion:
        return DataVersion(self.timestamp, self.counter, self.state_version)

    def to_json(self) -> dict[str, int]:
        """The broker's own form (topics.json, subscriptionGroup.json): without stateVersion, as 4.x writes it."""
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        """Lenient about the shape (anything but an object is version 0/0, as a missing one), strict about numbers
        (``NumberError``). The nameserver and the SDK read theirs with their own error types."""
        if not isinstance(obj, dict):
            return cls()
        return cls(timestamp=parse_int(obj.get("timestamp", 0)), counter=parse_int(obj.get("counter", 0)))
