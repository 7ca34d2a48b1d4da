"""Everything a request handler may touch, in one object built by ``BrokerServer`` (no globals).

Handlers get the settings, the store, the metadata managers and the services through this context, never the
server itself: the server stays a composition root and handlers stay testable pieces. The services' classes are
imported for typing only, so this module (which every processor imports) pulls in none of them at run time; the
pop service, whose module imports this one, is seen through the one method handlers call (``PopProgress``).
``spawn`` keeps a reference to background work started by a handler (persisting a changed table, an immediate
registration) so it is not garbage collected half-way and can be awaited at stop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from broker.client_manager import ClientManager
from broker.config import BrokerRole, BrokerSettings
from broker.filter.consumer_filters import ConsumerFilters
from broker.long_polling import PullRequestHoldService
from broker.metadata.consumer_offsets import ConsumerOffsetManager
from broker.metadata.delay_offsets import DelayOffsetManager
from broker.metadata.subscription_groups import SubscriptionGroupManager
from broker.metadata.topics import TopicConfigManager
from remoting.message_codec import offset_msg_id

if TYPE_CHECKING:
    from broker.dedup import SendDedupWindow
    from broker.ha.service import HAService
    from broker.metrics import BrokerMetrics
    from broker.rebalance_lock import RebalanceLockManager
    from broker.retry import RetryService
    from broker.slave_notify import SlaveNotifier
    from broker.store.message_store import MessageStore
    from broker.transaction.service import TransactionService

log = logging.getLogger(__name__)


class Counter:
    """A total plus per-second buckets for a rate over the last ``window_s`` seconds (putTps, getTransferedTps)."""

    __slots__ = ("_buckets", "_window_s", "total")

    def __init__(self, window_s: int = 10) -> None:
        self.total = 0
        self._window_s = window_s
        self._buckets: deque[list[int]] = deque(maxlen=window_s + 1)

    def add(self, n: int, now: float | None = None) -> None:
        self.total += n
        second = int(time.monotonic() if now is None else now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += n
        else:
            self._buckets.append([second, n])

    def rate(self, now: float | None = None) -> float:
        second = int(time.monotonic() if now is None else now)
        recent = sum(n for s, n in self._buckets if second - self._window_s <= s < second)
        return recent / self._window_s


@dataclass
class BrokerStats:
    put: Counter = field(default_factory=Counter)
    get: Counter = field(default_factory=Counter)


class PopProgress(Protocol):
    """What GET_CONSUME_STATS asks of the RocketMQ 5 pop service (``broker.grpc_v2.pop.service.PopService``)."""

    def queue_progress(self, group: str) -> dict[tuple[str, int], tuple[int, int]]: ...


@dataclass
class MasterAddrs:
    """The master's addresses as the last registration round reported them (spec §2.3, §2.7); empty on a master
    and on a slave whose master has not registered. ``BrokerServer`` updates them, handlers read them."""

    ha: str = ""  # haServerAddr: where the slave's HA client connects
    broker: str = ""  # masterAddr: the master's remoting address


@dataclass
class BrokerContext:
    settings: BrokerSettings
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    delay_offsets: DelayOffsetManager
    clients: ClientManager
    hold: PullRequestHoldService
    locks: RebalanceLockManager | None = None  # LOCK_BATCH_MQ / UNLOCK_BATCH_MQ
    retry: RetryService | None = None
    metrics: BrokerMetrics | None = None  # handlers call it once per request; None in benchmarks without metrics
    dedup: SendDedupWindow | None = None  # for sends with the ``dedup`` ext field; None when the window is off
    # an immediate registration round; the future resolves when a round that carries the current topics ended
    register_now: Callable[[], asyncio.Future | None] = lambda: None
    ha: HAService | None = None  # GET_BROKER_HA_STATUS; None in handler tests that run no HA
    master: MasterAddrs = field(default_factory=MasterAddrs)
    transactions: TransactionService | None = None  # on a master that takes transactional messages
    slave_notifier: SlaveNotifier | None = None  # on a master: pushes metadata changes to subscribed slaves
    pop: PopProgress | None = None  # on a master serving RocketMQ 5 clients (GET_CONSUME_STATS' in-flight pops)
    stats: BrokerStats = field(default_factory=BrokerStats)
    filters: ConsumerFilters = field(default_factory=ConsumerFilters)  # compiled SQL92 subscriptions
    boot_timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    _background: set[asyncio.Task] = field(default_factory=set)
    _retry_register_at: float = 0.0  # loop time of the last registration asked for by retry_topics_changed
    _retry_register_timer: asyncio.TimerHandle | None = None

    # identity -----------------------------------------------------------------------------------------------
    @property
    def broker_name(self) -> str:
        return self.settings.broker.broker_name

    @property
    def broker_id(self) -> int:
        return self.settings.broker.broker_id

    @property
    def is_slave(self) -> bool:
        return self.settings.role is BrokerRole.SLAVE

    @property
    def store_host(self) -> tuple[str, int]:
        return self.settings.broker.broker_ip1, self.settings.broker.listen_port

    # per-request constants, computed once (settings never change under a running context) --------------------
    @functools.cached_property
    def max_delay_level(self) -> int:
        """Number of delay levels; ``settings.store.delay_levels_ms`` parses messageDelayLevel on every read."""
        return len(self.settings.store.delay_levels_ms)

    @functools.cached_property
    def max_message_size(self) -> int:
        return self.settings.store.max_message_size

    @functools.cached_property
    def offset_msg_id_prefix(self) -> str:
        """The first 16 hex characters of every offsetMsgId of this broker (store IPv4 + port): per message only
        the 16-character physical offset is formatted (``offset_msg_id`` splits the IP each call)."""
        return offset_msg_id(self.store_host, 0)[:16]

    def offset_msg_ids(self, physical_offsets: list[int]) -> list[str]:
        prefix = self.offset_msg_id_prefix
        return [f"{prefix}{p:016X}" for p in physical_offsets]

    def slave_refusal(self, what: str) -> str:
        return f"broker {self.broker_name} id {self.broker_id} is a slave; {what}"

    # background work ----------------------------------------------------------------------------------------
    def spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed: %r", task.get_name(), task.exception())

    async def drain_background(self, timeout_s: float = 5.0) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout_s)

    def topics_changed(self) -> None:
        """Tell the nameservers at once (spec §2.3 immediate registration). topics.json needs nothing here: the
        change was counted by the manager, whose batched writer saves it within ``flushMetadataInterval``
        (``await ctx.topics.persist()`` where an answer must wait for the disk)."""
        self.register_now()

    def retry_topics_changed(self) -> None:
        """A heartbeat or pull created its group's %RETRY% topic: register at once, but at most once per
        ``flushMetadataInterval`` (later ones share the next round). RocketMQ registers per retry topic, which in a
        storm of new groups sent the whole, growing topic table to every nameserver per group."""
        if self._retry_register_timer is not None:
            return
        loop = asyncio.get_running_loop()
        due = self._retry_register_at + self.settings.broker.flush_metadata_interval / 1000
        if due <= loop.time():
            self._register_retry_topics()
        else:
            self._retry_register_timer = loop.call_at(due, self._register_retry_topics)

    def _register_retry_topics(self) -> None:
        self._retry_register_timer = None
        self._retry_register_at = asyncio.get_running_loop().time()
        self.register_now()

    def groups_changed(self) -> None:
        """A hook for group changes; subscriptionGroup.json is written by the manager's batched writer."""
