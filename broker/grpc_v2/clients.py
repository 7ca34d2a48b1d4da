"""The RocketMQ 5 clients this broker knows, keyed on the ``x-mq-client-id`` header (Telemetry stream, heartbeats
and termination all name it), with the Settings each last sent. Bounded: at most ``MAX_CLIENTS``; a client silent
for ``EXPIRE_S`` (no heartbeat, no open Telemetry stream) is dropped by ``expire``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from broker.grpc_v2.pb import definition_pb2 as pb

MAX_CLIENTS = 10_000
MAX_STREAMS_PER_CLIENT = 16
EXPIRE_S = 120.0


@dataclass
class V2Client:
    client_id: str
    client_type: int = pb.ClientType.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    settings: pb.Settings | None = None
    last_seen: float = field(default_factory=time.monotonic)
    streams: int = 0
    channel: object = None  # presence.V2Channel: its membership in the broker's client table


class V2Clients:
    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self._clients: dict[str, V2Client] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> V2Client | None:
        return self._clients.get(client_id)

    def touch(self, client_id: str) -> V2Client | None:
        """The client's record, created if there is room (None when the table is full)."""
        client = self._clients.get(client_id)
        if client is None:
            if len(self._clients) >= self.max_clients:
                self.expire()
                if len(self._clients) >= self.max_clients:
                    return None
            client = self._clients[client_id] = V2Client(client_id)
        client.last_seen = time.monotonic()
        return client

    def alive(self, client_id: str, now: float | None = None) -> bool:
        """Known and not silent for EXPIRE_S (an open Telemetry stream counts as alive)."""
        c = self._clients.get(client_id)
        now = time.monotonic() if now is None else now
        return c is not None and (c.streams > 0 or now - c.last_seen <= EXPIRE_S)

    def remove(self, client_id: str) -> None:
        self._clients.pop(client_id, None)

    def groups(self) -> dict[str, list[str]]:
        """Consumer group -> client ids (for observability)."""
        out: dict[str, list[str]] = {}
        for c in self._clients.values():
            if c.group:
                out.setdefault(c.group, []).append(c.client_id)
        return out

    def expire(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        dead = [cid for cid, c in self._clients.items() if c.streams == 0 and now - c.last_seen > EXPIRE_S]
        for cid in dead:
            del self._clients[cid]
        return len(dead)
