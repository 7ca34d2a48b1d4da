"""Heartbeats from clients: which client ids consume in which group, with which subscriptions.

RocketMQ's ConsumerManager/ProducerManager key clients by their Netty channel and drop them when the channel
closes or stays silent for 120 s. gRPC hides channels, so a client here is identified by its ``client_id`` and
dropped after ``CHANNEL_EXPIRED_S`` (120 s) without a heartbeat; a scan runs every 10 s. ``consumer_ids`` is
sorted because every consumer of a group runs the same rebalance over it and must see the same order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.service import Service

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_S = 120.0
SCAN_INTERVAL_S = 10.0
MAX_SUBSCRIPTIONS_PER_GROUP = 1024  # bounded: a heartbeat with 10^5 subscriptions keeps only this many


@dataclass(slots=True)
class ConsumerClient:
    client_id: str
    last_seen: float
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> "*" / "a || b"


class ClientManager(Service):
    def __init__(self, *, expire_s: float = CHANNEL_EXPIRED_S, scan_interval_s: float = SCAN_INTERVAL_S) -> None:
        super().__init__("client-manager")
        self.expire_s = expire_s
        self.scan_interval_s = scan_interval_s
        self.consumers: dict[str, dict[str, ConsumerClient]] = {}  # group -> client id -> client
        self.producers: dict[str, dict[str, float]] = {}  # group -> client id -> last seen

    async def on_start(self) -> None:
        self.run_every("scan", self.scan_interval_s, self.scan_expired)

    # heartbeats ---------------------------------------------------------------------------------------------
    def consumer_heartbeat(
        self,
        client_id: str,
        group: str,
        *,
        consume_type: str = "",
        message_model: str = "",
        consume_from_where: str = "",
        subscriptions: Iterable[tuple[str, str]] = (),
        now: float | None = None,
    ) -> bool:
        """Record a consumer heartbeat; True when the client is new to the group (membership changed)."""
        now = time.monotonic() if now is None else now
        members = self.consumers.setdefault(group, {})
        subs: dict[str, str] = {}
        for topic, expr in subscriptions:
            if len(subs) >= MAX_SUBSCRIPTIONS_PER_GROUP:
                break
            subs[topic] = expr
        is_new = client_id not in members
        members[client_id] = ConsumerClient(client_id, now, consume_type, message_model, consume_from_where, subs)
        if is_new:
            log.info("consumer %s joined group %s (%d members)", client_id, group, len(members))
        return is_new

    def producer_heartbeat(self, client_id: str, group: str, *, now: float | None = None) -> None:
        self.producers.setdefault(group, {})[client_id] = time.monotonic() if now is None else now

    def unregister(self, client_id: str, *, consumer_group: str = "", producer_group: str = "") -> None:
        groups = [consumer_group] if consumer_group else list(self.consumers)
        for group in groups:
            members = self.consumers.get(group)
            if members and members.pop(client_id, None) is not None:
                log.info("consumer %s left group %s", client_id, group)
                if not members:
                    del self.consumers[group]
        pgroups = [producer_group] if producer_group else list(self.producers)
        for group in pgroups:
            members = self.producers.get(group)
            if members is not None:
                members.pop(client_id, None)
                if not members:
                    del self.producers[group]

    # queries ------------------------------------------------------------------------------------------------
    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self.consumers.get(group, {}))

    def subscriptions(self, group: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for client in self.consumers.get(group, {}).values():
            out.update(client.subscriptions)
        return out

    # expiry -------------------------------------------------------------------------------------------------
    def scan_expired(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        dropped = 0
        for group in list(self.consumers):
            members = self.consumers[group]
            for client_id, client in list(members.items()):
                if now - client.last_seen > self.expire_s:
                    del members[client_id]
                    dropped += 1
                    log.info("consumer %s of group %s silent for %.0fs; dropped", client_id, group, self.expire_s)
            if not members:
                del self.consumers[group]
        for group in list(self.producers):
            members = self.producers[group]
            for client_id, seen in list(members.items()):
                if now - seen > self.expire_s:
                    del members[client_id]
                    dropped += 1
            if not members:
                del self.producers[group]
        return dropped
