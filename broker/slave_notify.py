"""The master's push of metadata changes to its slaves: topics, groups, consumer and delay offsets in milliseconds.

RocketMQ's slave learns metadata only from its SlaveSynchronize round (every 10 s), so a topic created a few seconds
before a master died is unknown on the slave that replaces it (issue 23). Here the slave's sync stays RocketMQ's
(it pulls GET_ALL_* over remoting), and the master tells it *when* to pull:

- **Subscription.** A pyrmq slave's GET_ALL_TOPIC_CONFIG carries the ext field ``notifyMetadataChange=true``; the
  master then keeps that connection (the one the slave opened and authenticated, never a new one to an address it
  was told) as a subscriber until it closes. A RocketMQ master ignores the field and its slave keeps the 10 s round.
  At most ``MAX_SUBSCRIBERS`` (a broker group's slaves); past that the newest is refused, logged at most every 10 s.
- **Notification.** NOTIFY_METADATA_CHANGED (pyrmq's code, RocketMQ's remoting framing, sent ONEWAY on the
  slave's own connection as a broker sends NOTIFY_CONSUMER_IDS_CHANGED to a client; a RocketMQ slave would drop it):
  ext ``topicConfigChanged`` / ``subscriptionGroupChanged`` = ``true`` when that table's DataVersion moved (the
  slave then pulls it with 21 / 201 at once); a body ``{"offsetTable": {"T@G": {q: off}}, "resetVersion": {...}}``
  (GET_ALL_CONSUMER_OFFSET's shape) with only the consumer offsets that changed, which the slave merges with its
  usual monotonic rule: offsets change on every commit, so they travel as a delta, never as a table pull. The same
  body's ``"delayOffsetTable": {level: off}`` carries the delay levels whose offset moved since the last notification
  (GET_ALL_DELAY_OFFSET's ``offsetTable``; the schedule service moves one after each delivery): the slave takes each
  level only forward, so a slave promoted after the master's death resumes where the master stopped instead of
  re-delivering what the master delivered during the last ``slaveSynchronizeInterval`` (a slave of an older pyrmq
  ignores the key). On a SYNC_MASTER the re-put of the delivered copies waits for the slaves before the level moves
  (unless that wait times out); on an ASYNC_MASTER a push can overtake their replication, and a slave promoted by
  hand within that lag misses those copies instead of delivering them twice (controller mode runs SYNC_MASTER). Ext ``authChanged=true`` when a user or ACL changed (ACL 2.0 on): the slave pulls users and ACLs
  at once with its inner credentials.
- **Coalescing.** The first change after a quiet period goes out at once; changes while a notification was sent
  less than ``min_interval_s`` (50 ms) ago wait for that interval and share the next one. So 5,000 groups created in
  a burst cost at most 20 notifications a second, and each slave pulls the group table at most that often (and never
  twice at once: its pulls are sequential). The offset delta is bounded by the offset table itself, the delay delta
  by the number of delay levels.
- **Replicated answers.** After each table pull the slave sends NOTIFY_METADATA_CHANGED back (ONEWAY, same ext keys,
  each the DataVersion counter it now holds). ``replicated(kind, counter, timeout_s)`` waits until every subscriber
  holds that table at a counter at least ``counter``: updateTopic and updateSubGroup answer once their change is on
  the slaves (bounded), so a change a tool was told about survives the master's SIGKILL in controller mode.

Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from common.log import RateLimitedLog
from common.service import Service
from remoting import fastjson
from remoting.codes import RequestCode
from remoting.connection import Connection
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand

log = logging.getLogger(__name__)
quiet = RateLimitedLog(log)

SUBSCRIBE_FIELD = "notifyMetadataChange"
TOPICS, GROUPS = "topicConfigChanged", "subscriptionGroupChanged"
DELAY_TABLE = "delayOffsetTable"  # the body's delay levels that moved: {"level": offset}
AUTH = "authChanged"  # users or ACLs changed: the slave pulls both (AUTH_LIST_USER / AUTH_LIST_ACL, inner credentials)
MAX_SUBSCRIBERS = 16
MIN_INTERVAL_S = 0.05
REPLICATED_WAIT_S = 1.0  # how long updateTopic / updateSubGroup wait for the slaves (well inside a client's 3 s timeout)


async def slaves_hold(notifier: SlaveNotifier | None, kind: str, counter: int) -> str:
    """Wait (bounded) until the subscribed slaves hold ``kind`` at ``counter``; a remark suffix naming any that do
    not yet ("" when all do or none is subscribed)."""
    if notifier is None:
        return ""
    behind = await notifier.replicated(kind, counter, REPLICATED_WAIT_S)
    if not behind:
        return f", held by {len(notifier.subscribers)} slave(s)" if notifier.subscribers else ""
    return (f", not yet held by slave(s) {', '.join(behind)} after {REPLICATED_WAIT_S:g} s (they take it at their"
            " next sync round)")


class SlaveNotifier(Service):
    def __init__(self, *, topics, groups, offsets, delay_offsets, min_interval_s: float = MIN_INTERVAL_S,
                 max_subscribers: int = MAX_SUBSCRIBERS) -> None:
        super().__init__("slave-notify")
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.min_interval_s = min_interval_s
        self.max_subscribers = max_subscribers
        self.subscribers: dict[int, Connection] = {}
        self.held_counters: dict[int, dict[str, int]] = {}  # id(conn) -> kind -> DataVersion counter it holds
        self.sent = 0
        self._pending: set[str] = set()
        self._delay_moved = False
        self._delay_sent: dict[int, int] = delay_offsets.snapshot()  # each level as last pushed (or loaded)
        self._wake = asyncio.Event()
        self._held = asyncio.Event()
        self._seen = {TOPICS: topics.data_version.counter, GROUPS: groups.data_version.counter}

    # hooks ----------------------------------------------------------------------------------------------------
    def on_tables_changed(self) -> None:
        """A change listener of the topic and group managers (they call it on every change)."""
        if self.topics.data_version.counter != self._seen[TOPICS]:
            self._pending.add(TOPICS)
        if self.groups.data_version.counter != self._seen[GROUPS]:
            self._pending.add(GROUPS)
        self._wake.set()

    def on_offsets_changed(self) -> None:
        self._wake.set()

    def on_delay_offsets_changed(self) -> None:
        """A change listener of the DelayOffsetManager (the schedule service moved a level)."""
        self._delay_moved = True
        self._wake.set()

    def on_auth_changed(self) -> None:
        """A change listener of the AuthStore: a user or ACL was created, updated or deleted."""
        self._pending.add(AUTH)
        self._wake.set()

    def subscribe(self, conn: Connection) -> bool:
        key = id(conn)
        if key in self.subscribers:
            return True
        for k, c in list(self.subscribers.items()):
            if not c.is_open:
                self._forget(k)
        if len(self.subscribers) >= self.max_subscribers:
            quiet.warning("metadata change subscription from %s refused: %d slaves subscribed already", conn.peer,
                          len(self.subscribers))
            return False
        self.subscribers[key] = conn
        self.held_counters[key] = {}
        if conn.closed is not None:
            conn.closed.add_done_callback(lambda _f, k=key: self._forget(k))
        log.info("slave %s subscribed to metadata changes", conn.peer)
        if self.offsets.changed_keys is None:
            self.offsets.changed_keys = set()  # track from now on; a new subscriber pulls the whole table itself
        return True

    def held(self, conn: Connection, kind: str, counter: int) -> None:
        """A subscriber reports it holds ``kind``'s table at DataVersion ``counter``."""
        counters = self.held_counters.get(id(conn))
        if counters is not None:
            counters[kind] = max(counters.get(kind, 0), counter)
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        """Wake every ``replicated`` waiter once (they re-check), and give later waits a fresh event."""
        self._held.set()
        self._held = asyncio.Event()

    def _forget(self, key: int) -> None:
        conn = self.subscribers.pop(key, None)
        self.held_counters.pop(key, None)
        if conn is not None:
            log.info("slave %s no longer subscribed to metadata changes (connection closed)", conn.peer)
        if not self.subscribers:
            self.offsets.changed_keys = None
        self._wake_waiters()  # waiters re-check without it

    async def replicated(self, kind: str, counter: int, timeout_s: float) -> list[str]:
        """Wait until every subscriber holds ``kind`` at ``counter`` or later; the peers still behind at the
        deadline (empty: all have it, or no slave subscribed)."""
        deadline = time.monotonic() + timeout_s
        while True:
            behind = [c.peer for k, c in self.subscribers.items()
                      if c.is_open and self.held_counters.get(k, {}).get(kind, -1) < counter]
            left = deadline - time.monotonic()
            if not behind or left <= 0:
                return behind
            try:
                await asyncio.wait_for(self._held.wait(), left)
            except TimeoutError:
                pass

    # the loop ---------------------------------------------------------------------------------------------------
    async def on_start(self) -> None:
        self.spawn("notify", self._loop())

    async def on_stop(self) -> None:
        self._wake.set()  # the loop sees ``stopping``

    async def _loop(self) -> None:
        while not self.stopping:
            await self._wake.wait()
            self._wake.clear()
            if self.stopping:
                return
            self._notify_once()
            if await self.sleep(self.min_interval_s):
                return

    def _notify_once(self) -> None:
        kinds, self._pending = self._pending, set()
        self._seen = {TOPICS: self.topics.data_version.counter, GROUPS: self.groups.data_version.counter}
        body = self._offsets_delta()
        delay = self._delay_delta()
        if delay:
            body = {**(body or {}), DELAY_TABLE: delay}
        live = [c for c in self.subscribers.values() if c.is_open]
        if not live or (not kinds and not body):
            return
        ext = {kind: "true" for kind in sorted(kinds)}
        payload = fastjson.dumps(body) if body else b""
        for conn in live:
            try:
                conn.invoke_oneway(RemotingCommand(int(RequestCode.NOTIFY_METADATA_CHANGED), ext=dict(ext),
                                                   body=payload))
            except RemotingError as exc:
                quiet.warning("metadata change notification to %s failed: %s", conn.peer, exc)
        self.sent += 1

    def _offsets_delta(self) -> dict[str, Any] | None:
        keys = self.offsets.changed_keys
        if not keys:
            return None
        self.offsets.changed_keys = set()
        table, versions = self.offsets.entries(keys)
        if not table:
            return None
        return {"offsetTable": {key: {str(q): off for q, off in qs.items()} for key, qs in table.items()},
                "resetVersion": versions}

    def _delay_delta(self) -> dict[str, int] | None:
        if not self._delay_moved:
            return None
        self._delay_moved = False
        now = self.delay_offsets.snapshot()
        moved = {level: off for level, off in now.items() if self._delay_sent.get(level) != off}
        self._delay_sent = now
        return {str(level): off for level, off in sorted(moved.items())} or None
