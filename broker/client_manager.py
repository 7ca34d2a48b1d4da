"""Who is connected: producer and consumer groups, their connections and the consumers' subscriptions
(RocketMQ ConsumerManager + ProducerManager + ClientHousekeepingService).

As in RocketMQ, a client is known by its *connection* (Netty's channel): HEART_BEAT registers the connection under
each group it names, with the client id, language and version it announced; UNREGISTER_CLIENT or the connection's
close removes it, and so does 120 s without a heartbeat (``CHANNEL_EXPIRED_S``, scanned every 10 s; the
``on_expired`` listeners then close the connection, as RocketMQ's housekeeping closes the channel).

A consumer group keeps one subscription table, replaced by every heartbeat of the group (RocketMQ's
``updateSubscription``: a topic missing from the latest heartbeat is dropped, a topic is replaced only by a newer
``subVersion``). PULL_MESSAGE without the SUBSCRIPTION flag reads it (Java and C++ consumers never send their
subscription with the pull).

``on_group_changed(group, connections)`` listeners learn of every change of a consumer group's membership (a
connection joined or left); the broker then sends NOTIFY_CONSUMER_IDS_CHANGED to the remaining connections.
``consumer_ids`` is sorted because every consumer of a group runs the same rebalance over it.

Single-threaded (the event loop). Connections are any hashable object (``remoting.connection.Connection`` in
the broker; plain objects in unit tests); the clock is injectable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from common.log import RateLimitedLog
from common.service import Service
from remoting.message_codec import TagFilter

log = logging.getLogger(__name__)
# A storm of heartbeats naming new groups (or a client flapping) must not write a line per event: at most one join
# and one leave line per second, with the count of those left out.
joins_log = RateLimitedLog(log, 1.0)
leaves_log = RateLimitedLog(log, 1.0)

CHANNEL_EXPIRED_S = 120.0
SCAN_INTERVAL_S = 10.0
MAX_SUBSCRIPTIONS_PER_GROUP = 1024  # bounded: a heartbeat with 10^5 subscriptions keeps only this many

Conn = Any


@dataclass(slots=True)
class ClientChannel:
    """One client connection in a group (RocketMQ ClientChannelInfo)."""

    conn: Conn
    client_id: str
    language: str
    version: int
    last_seen: float

    @property
    def addr(self) -> str:
        return getattr(self.conn, "peer", "") or ""


@dataclass(slots=True)
class Subscription:
    """A consumer group's subscription to one topic (RocketMQ SubscriptionData)."""

    topic: str
    sub_string: str = "*"
    expression_type: str = "TAG"
    sub_version: int = 0
    class_filter_mode: bool = False
    tag_filter: TagFilter = field(init=False)

    def __post_init__(self) -> None:
        self.tag_filter = TagFilter(self.sub_string if self.expression_type == "TAG" else "*")

    def as_json(self) -> dict[str, Any]:
        """The wire form (SubscriptionData), e.g. for GET_CONSUMER_CONNECTION_LIST's ``subscriptionTable``."""
        tags = sorted(self.tag_filter.tags) if self.expression_type == "TAG" else []
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.tag_filter.codes) if tags else [],
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": tags,
            "topic": self.topic,
        }


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    channels: dict[Conn, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


GroupListener = Callable[[str, list[Conn]], None]
ExpiryListener = Callable[[Conn], None]


class ClientManager(Service):
    def __init__(
        self,
        *,
        expire_s: float = CHANNEL_EXPIRED_S,
        scan_interval_s: float = SCAN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("client-manager")
        self.expire_s = expire_s
        self.scan_interval_s = scan_interval_s
        self._clock = clock
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[Conn, ClientChannel]] = {}
        self.on_group_changed: list[GroupListener] = []
        self.on_expired: list[ExpiryListener] = []

    async def on_start(self) -> None:
        self.run_every("scan", self.scan_interval_s, self.scan_expired)

    # registration -------------------------------------------------------------------------------------------
    def register_consumer(
        self,
        conn: Conn,
        group: str,
        client_id: str,
        *,
        language: str = "",
        version: int = 0,
        consume_type: str = "",
        message_model: str = "",
        consume_from_where: str = "",
        subscriptions: Iterable[Subscription] = (),
    ) -> bool:
        """Record a consumer heartbeat; True when the connection is new to the group (membership changed)."""
        now = self._clock()
        info = self.consumers.get(group)
        if info is None:
            info = self.consumers[group] = ConsumerGroupInfo(group)
        info.consume_type, info.message_model, info.consume_from_where = consume_type, message_model, consume_from_where
        channel = info.channels.get(conn)
        is_new = channel is None or channel.client_id != client_id
        info.channels[conn] = ClientChannel(conn, client_id, language, version, now)
        self._update_subscriptions(info, subscriptions)
        if is_new:
            joins_log.log(logging.INFO, "consumer %s (%s) joined group %s (%d connections)", client_id, _peer(conn),
                          group, len(info.channels))
            self._changed(group)
        return is_new

    @staticmethod
    def _update_subscriptions(info: ConsumerGroupInfo, subscriptions: Iterable[Subscription]) -> None:
        latest: dict[str, Subscription] = {}
        for sub in subscriptions:
            if len(latest) >= MAX_SUBSCRIPTIONS_PER_GROUP:
                break
            latest[sub.topic] = sub
        table = info.subscriptions
        for topic, sub in latest.items():
            old = table.get(topic)
            if old is None or sub.sub_version > old.sub_version or old.sub_string != sub.sub_string:
                table[topic] = sub
        for topic in [t for t in table if t not in latest]:
            del table[topic]

    def register_producer(self, conn: Conn, group: str, client_id: str, *, language: str = "", version: int = 0) -> None:
        self.producers.setdefault(group, {})[conn] = ClientChannel(conn, client_id, language, version, self._clock())

    def unregister(self, conn: Conn, *, consumer_group: str = "", producer_group: str = "") -> list[str]:
        """UNREGISTER_CLIENT: drop the connection from the named groups (all of them when none is named).
        Returns the consumer groups whose membership changed."""
        changed: list[str] = []
        for group in [consumer_group] if consumer_group else list(self.consumers):
            if self._drop_consumer(conn, group):
                changed.append(group)
        for group in [producer_group] if producer_group else list(self.producers):
            self._drop_producer(conn, group)
        for group in changed:
            self._changed(group)
        return changed

    def connection_closed(self, conn: Conn) -> list[str]:
        """The connection closed (RocketMQ's doChannelCloseEvent): forget it everywhere."""
        return self.unregister(conn)

    def _drop_consumer(self, conn: Conn, group: str) -> bool:
        info = self.consumers.get(group)
        if info is None:
            return False
        channel = info.channels.pop(conn, None)
        if channel is None:
            return False
        leaves_log.log(logging.INFO, "consumer %s (%s) left group %s", channel.client_id, _peer(conn), group)
        if not info.channels:
            del self.consumers[group]
        return True

    def _drop_producer(self, conn: Conn, group: str) -> None:
        members = self.producers.get(group)
        if members is not None and members.pop(conn, None) is not None and not members:
            del self.producers[group]

    def _changed(self, group: str) -> None:
        info = self.consumers.get(group)
        conns = list(info.channels) if info is not None else []
        for listener in self.on_group_changed:
            try:
                listener(group, conns)
            except Exception:
                log.exception("consumer-group listener %r failed for %s", listener, group)

    # queries ------------------------------------------------------------------------------------------------
    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumers.get(group)
        return info.client_ids() if info is not None else []

    def subscription(self, group: str, topic: str) -> Subscription | None:
        info = self.consumers.get(group)
        return info.subscriptions.get(topic) if info is not None else None

    def subscriptions(self, group: str) -> dict[str, str]:
        """topic -> expression of the group's current subscriptions."""
        info = self.consumers.get(group)
        return {t: s.sub_string for t, s in info.subscriptions.items()} if info is not None else {}

    def producer_channels(self, group: str) -> list[ClientChannel]:
        return list(self.producers.get(group, {}).values())

    # expiry -------------------------------------------------------------------------------------------------
    def scan_expired(self, now: float | None = None) -> int:
        """Drop connections silent for ``expire_s``; ``on_expired`` listeners close them. Returns how many."""
        now = self._clock() if now is None else now
        expired: dict[Conn, str] = {}
        for info in self.consumers.values():
            for conn, channel in info.channels.items():
                if now - channel.last_seen > self.expire_s:
                    expired[conn] = channel.client_id
        for members in self.producers.values():
            for conn, channel in members.items():
                if now - channel.last_seen > self.expire_s:
                    expired[conn] = channel.client_id
        for conn, client_id in expired.items():
            log.info("client %s (%s) sent no heartbeat for %.0f s; dropped", client_id, _peer(conn), self.expire_s)
            self.unregister(conn)
            for listener in self.on_expired:
                try:
                    listener(conn)
                except Exception:
                    log.exception("expiry listener %r failed", listener)
        return len(expired)


def _peer(conn: Conn) -> str:
    return getattr(conn, "peer", None) or repr(conn)
