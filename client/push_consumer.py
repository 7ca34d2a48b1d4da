"""PushConsumer: pulls the queues it owns with long polling and hands messages to a listener.

Clustering (default): the group's queues are split with ``allocate_averagely`` over the sorted consumer ids
the brokers report (GET_CONSUMER_LIST_BY_GROUP, 38; client/group_members.py). The consumer rebalances at once
when a broker sends NOTIFY_CONSUMER_IDS_CHANGED (40) on its connection, when a GET_CONSUMER_LIST_BY_GROUP poll
every ``membership_poll_interval_s`` shows a change (a safety net for a lost oneway notification), and anyway every
``rebalance_interval_s``. A queue given up is stopped, its running consumption allowed to finish (up to
``drop_wait_s``) and its offset committed before it is forgotten; a queue taken over while other members exist
starts after ``takeover_delay_s``, so the previous owner has committed first. ``%RETRY%<group>`` is
subscribed automatically. Broadcasting: every consumer takes every queue; offsets live in a local file.

The consumer sends HEART_BEAT (34, HeartbeatData with its subscriptions, see client/heartbeat.py) at start, every
``heartbeat_interval_s`` and whenever its routes name a broker it has not told yet, to every node (master and
slaves) of its topics' groups, and UNREGISTER_CLIENT (35) to them when it stops.

Per owned queue one pull task long-polls (``suspend_ms`` at the broker, RPC deadline ``pull_timeout_s``, above
the suspend time) and follows the broker's read advice like PullConsumer. A queue without a committed offset
starts at CONSUME_FROM_WHERE (client/start_offset.py): the queue's max offset (GET_MAX_OFFSET 30), 0, or
SEARCH_OFFSET_BY_TIMESTAMP (29); a retry topic always starts at 0. At most ``START_OFFSET_LOOKUPS`` queues look
their start offset up at once, and each pulls as soon as its own is known (a consumer of thousands of queues
neither waits for all of them nor floods the broker). ``pull_interval_ms`` (RocketMQ's
pullInterval, default 0) pauses a queue after a pull that returned less than a full batch: one pull RPC costs
about as much broker CPU as tens of messages, so a consumer that keeps up can trade that much latency for far
fewer pulls. Messages go
to the ConsumeService (client/consume_service.py: listener workers, send-back of RECONSUME_LATER, local
retries, backpressure at ``max_inflight_messages``). Offsets advance only past consumed messages (the
lowest one still in flight) and are committed every ``persist_interval_s``, when a queue is given up, and on
stop. A pull error retries that queue after ``pull_retry_delay_s``; OFFSET_ILLEGAL continues from the broker's
next_begin_offset.

Not thread-safe: use from the event loop that started it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
import time
from pathlib import Path

from client.consume_service import ConsumeService, ConsumeStatus, Listener
from client.errors import ClientStateError, MQClientError
from client.heartbeat import check_client_config, consumer_heartbeat_body, new_client_id, send_heartbeats, unregister
from client.lifecycle import Lifecycle
from client.message import MessageQueue
from client.group_members import consumer_ids
from client.namesrv import NamesrvClient
from client.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from client.process_queue import ProcessQueue, allocate_averagely
from client.producer import Producer
from client.pull_api import PullAPI, PullStatus
from client.route_cache import RouteCache
from client.rpc import ClientRemoting
from client.selector import MessageSelector, Selector, as_selector
from client.start_offset import ConsumeFromWhere, start_offset
from client.trace import ConsumeTrace, TraceDispatcher
from client.trace_codec import TRACE_PRODUCER_GROUP, TRACE_TOPIC
from common.service import Service
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.message_codec import RETRY_GROUP_TOPIC_PREFIX

__all__ = ["ConsumeFromWhere", "ConsumeStatus", "MessageModel", "PushConsumer"]

log = logging.getLogger(__name__)


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


MISSING_ROUTE_RETRY_S = 2.0  # how often a subscribed topic without a route (yet) is looked up again
# Start-time requests in flight at once: route reads of the subscribed topics at start, and start-offset lookups
# (QUERY_CONSUMER_OFFSET, then GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP) of new queues. One at a time, a consumer
# of 1,000 topics x 8 queues spends thousands of round trips before its last queue pulls; all at once, 8,000 lookups
# queue up behind each other and behind the first queues' long polls at the broker and time out.
START_ROUTE_READS = 16
START_OFFSET_LOOKUPS = 32


class PushConsumer(Lifecycle):
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int = 0,
        pull_batch_size: int = 32,
        pull_interval_ms: float = 0.0,
        consume_batch_max_size: int = 1,
        consume_concurrency: int = 16,
        max_inflight_messages: int = 1000,
        rebalance_interval_s: float = 20.0,
        membership_poll_interval_s: float = 5.0,
        heartbeat_interval_s: float = 30.0,
        persist_interval_s: float = 5.0,
        pull_retry_delay_s: float = 3.0,
        local_retry_delay_s: float = 5.0,
        suspend_ms: int = 15_000,
        pull_timeout_s: float = 30.0,
        takeover_delay_s: float = 3.0,
        drop_wait_s: float = 5.0,
        max_reconsume_times: int = 0,
        request_timeout_s: float = 5.0,
        avoid_failed_broker_s: float = 5.0,
        poll_name_server_interval_s: float = 30.0,
        instance_name: str | None = None,
        offset_store_dir: str | Path | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
        credentials: tuple[str, str] | None = None,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str = "",
    ) -> None:
        """``enable_trace=True`` (or a ``trace_topic``) sends SubBefore/SubAfter trace records around each
        listener call, in the background (``client.trace``), to ``trace_topic`` (default ``RMQ_SYS_TRACE_TOPIC``)."""
        self.group = group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.pull_batch_size = pull_batch_size
        self.pull_interval_s = max(0.0, pull_interval_ms / 1000.0)
        self.consume_batch_max_size = max(1, consume_batch_max_size)
        self.consume_concurrency = max(1, consume_concurrency)
        self.max_inflight_messages = max(1, max_inflight_messages)
        self.rebalance_interval_s = rebalance_interval_s
        self.membership_poll_interval_s = membership_poll_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.persist_interval_s = persist_interval_s
        self.pull_retry_delay_s = pull_retry_delay_s
        self.local_retry_delay_s = local_retry_delay_s
        self.suspend_ms = suspend_ms
        self.pull_timeout_s = max(pull_timeout_s, suspend_ms / 1000.0 + 5.0)
        self.takeover_delay_s = takeover_delay_s
        self.drop_wait_s = drop_wait_s
        self.max_reconsume_times = max_reconsume_times
        self.request_timeout_s = request_timeout_s
        self.client_id = new_client_id(instance_name)
        self.remoting = ClientRemoting(avoid_failed_s=avoid_failed_broker_s, name=f"consumer.{group}",
                                      credentials=credentials,
                                      tls=tls, tls_ca=tls_ca)
        self.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_consumer_ids_changed)
        self.namesrv = NamesrvClient(namesrv_addr, remoting=self.remoting, timeout_s=request_timeout_s)
        self.routes = RouteCache(self.namesrv, self.remoting.health, poll_interval_s=poll_name_server_interval_s)
        self.sub_version = int(time.time() * 1000)  # SubscriptionData.subVersion of every subscription
        self.pull_api = PullAPI(group, self.routes, self.remoting, sub_version=self.sub_version)
        if message_model is MessageModel.BROADCASTING:
            base = Path(offset_store_dir) if offset_store_dir else Path.home() / ".pyrmq_offsets" / self.client_id
            self.offsets: RemoteBrokerOffsetStore | LocalFileOffsetStore = LocalFileOffsetStore(group, base)
        else:
            self.offsets = RemoteBrokerOffsetStore(group, self.routes, self.remoting, timeout_s=request_timeout_s)
        self._subscriptions: dict[str, MessageSelector] = {}
        self._listener: Listener | None = None
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._svc = Service(f"consumer.{group}")
        self._consume: ConsumeService | None = None
        self._last_cids: dict[str, list[str]] = {}
        self._last_full_rebalance = 0.0
        self._heartbeat_addrs: set[str] = set()
        self._rebalance_lock = asyncio.Lock()
        self._offset_lookups = asyncio.Semaphore(START_OFFSET_LOOKUPS)
        self._rebalance_now = asyncio.Event()  # set by NOTIFY_CONSUMER_IDS_CHANGED and by stop()
        self.notifications = 0  # NOTIFY_CONSUMER_IDS_CHANGED requests received
        self._pull_tasks: set[asyncio.Task] = set()
        self._missing_route_tried: dict[str, float] = {}
        self._state = "created"
        self.trace: ConsumeTrace | None = None
        if enable_trace or trace_topic:
            sender = Producer(TRACE_PRODUCER_GROUP, namesrv_addr, send_timeout_s=request_timeout_s)
            self.trace = ConsumeTrace(TraceDispatcher(sender, trace_topic or TRACE_TOPIC), group)

    # configuration ----------------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: Selector = "*", *, sql92: str | None = None) -> None:
        """``expression``: a tag expression (``*``, ``A || B``) or a ``MessageSelector``; ``sql92="a > 5"``
        subscribes to the messages whose properties match (the brokers need ``enablePropertyFilter=true``; start
        checks each with CHECK_CLIENT_CONFIG and raises ``BrokerError`` with the broker's reason)."""
        self._subscriptions[topic] = as_selector(expression, sql92)

    def register_message_listener(self, listener: Listener) -> None:
        self._listener = listener

    def owned_queues(self) -> list[MessageQueue]:
        return sorted(mq for mq, pq in self._pqs.items() if not pq.dropped)

    # lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> PushConsumer:
        if self._state == "started":
            return self
        if self._state != "created":
            raise ClientStateError(f"push consumer {self.group}", self._state)
        if self._listener is None or not self._subscriptions:
            raise ClientStateError(f"push consumer {self.group}", "missing a listener or a subscription")
        if self.message_model is MessageModel.CLUSTERING:
            self._subscriptions.setdefault(f"{RETRY_GROUP_TOPIC_PREFIX}{self.group}", MessageSelector.by_tag())
        await self._svc.start()
        self.routes.start()
        try:
            await self._read_routes()
            await self._check_selectors()
        except MQClientError:  # nothing was registered yet: undo the start, the consumer cannot run as asked
            await self._svc.stop(timeout_s=1.0)
            await self.routes.stop()
            await self.remoting.close()
            self._state = "stopped"
            raise
        self._state = "started"
        await self._heartbeat()
        self._consume = ConsumeService(
            self.group,
            self._listener,
            self.routes,
            self.remoting,
            broadcasting=self.message_model is MessageModel.BROADCASTING,
            concurrency=self.consume_concurrency,
            batch_max_size=self.consume_batch_max_size,
            max_inflight=self.max_inflight_messages,
            max_reconsume_times=self.max_reconsume_times,
            local_retry_delay_s=self.local_retry_delay_s,
            request_timeout_s=self.request_timeout_s,
        )
        if self.trace is not None:
            await self.trace.dispatcher.start()
            self._consume.trace = self.trace
        self._consume.start()
        await self._rebalance()
        self._svc.spawn("rebalance", self._rebalance_loop())
        self._svc.run_every("heartbeat", self.heartbeat_interval_s, self._heartbeat)
        self._svc.run_every("persist", self.persist_interval_s, self._persist_offsets)
        return self

    async def stop(self) -> None:
        if not self._begin_stop():
            return
        self._rebalance_now.set()
        pqs = list(self._pqs.values())
        for pq in pqs:
            pq.dropped = True
            if pq.task is not None:
                pq.task.cancel()
        await self._wait_idle(pqs, self.drop_wait_s)
        if self._pull_tasks:
            await asyncio.wait(list(self._pull_tasks), timeout=2.0)
        if self._consume is not None:
            await self._consume.stop()
        await self._persist_offsets()
        await self._unregister()
        await self._svc.stop(timeout_s=1.0)
        self._state = "stopped"
        await self.routes.stop()
        await self.remoting.close()
        if self.trace is not None:
            await self.trace.dispatcher.stop()

    async def _read_routes(self) -> None:
        """Every subscribed topic's route, ``START_ROUTE_READS`` reads at a time; a subscribed topic without a route
        fails the start, the retry topic may have none yet."""
        topics = iter(list(self._subscriptions))

        async def reader() -> None:
            for topic in topics:
                try:
                    await self.routes.refresh(topic)
                except MQClientError as exc:
                    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                        raise
                    log.debug("retry topic %s has no route yet: %s", topic, exc)

        readers = [asyncio.ensure_future(reader()) for _ in range(START_ROUTE_READS)]
        try:
            await asyncio.gather(*readers)
        finally:
            for task in readers:
                task.cancel()

    async def _check_selectors(self) -> None:
        """CHECK_CLIENT_CONFIG for every SQL92 subscription on every master of its topic (Java's
        checkClientInBroker): a broker without enablePropertyFilter, or a bad expression, fails the start."""
        for topic, selector in self._subscriptions.items():
            if selector.is_tag:
                continue
            for addr in sorted(self.routes.addrs_of([topic], masters_only=True)):
                await check_client_config(self.remoting, addr, self.client_id, self.group, topic, selector,
                                          self.sub_version, self.request_timeout_s)

    # heartbeats -------------------------------------------------------------------------------------------
    def _all_broker_addrs(self) -> set[str]:
        return self.routes.addrs_of(self._subscriptions)

    def _heartbeat_body(self) -> bytes:
        return consumer_heartbeat_body(
            self.client_id,
            self.group,
            sorted(self._subscriptions.items()),
            self.sub_version,
            consume_type="CONSUME_PASSIVELY",
            message_model=self.message_model.value,
            consume_from_where=self.consume_from_where.value,
        )

    async def _heartbeat(self) -> None:
        addrs = self._all_broker_addrs()
        self._heartbeat_addrs = addrs
        await send_heartbeats(self.remoting, addrs, self._heartbeat_body(), self.request_timeout_s)

    async def _unregister(self) -> None:
        await unregister(
            self.remoting,
            self._all_broker_addrs(),
            self.client_id,
            consumer_group=self.group,
            timeout_s=min(self.request_timeout_s, 2.0),
        )

    def _on_consumer_ids_changed(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """NOTIFY_CONSUMER_IDS_CHANGED (40): a member joined or left; rebalance now (rebalanceImmediately)."""
        group = (request.ext or {}).get("consumerGroup")
        if group in (None, self.group):
            self.notifications += 1
            self._rebalance_now.set()
        return None if request.is_oneway else response_to(request, ResponseCode.SUCCESS)

    # rebalance --------------------------------------------------------------------------------------------
    async def _wait_rebalance_due(self) -> bool:
        """Until a notification or the next membership poll; True when the consumer is stopping."""
        try:
            await asyncio.wait_for(self._rebalance_now.wait(), self.membership_poll_interval_s)
        except TimeoutError:
            pass
        return self._state != "started" or self._svc.stopping

    async def _rebalance_loop(self) -> None:
        while not await self._wait_rebalance_due():
            notified = self._rebalance_now.is_set()
            self._rebalance_now.clear()
            try:
                if self._heartbeat_addrs != self._all_broker_addrs():
                    await self._heartbeat()
                changed = notified
                if not changed and self.message_model is MessageModel.CLUSTERING:
                    memo: dict[str, list[str]] = {}  # one GET_CONSUMER_LIST_BY_GROUP per broker group per poll
                    for topic in self._subscriptions:
                        cids = await consumer_ids(self.routes, self.remoting, self.group, topic, self.request_timeout_s,
                                                  memo)
                        if cids is not None and cids != self._last_cids.get(topic):
                            changed = True
                            break
                due = time.monotonic() - self._last_full_rebalance >= self.rebalance_interval_s
                if changed or due or self._routes_changed():
                    await self._rebalance()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("rebalance of %s failed; next try in %.1fs", self.group, self.membership_poll_interval_s)

    def _queues_by_topic(self) -> dict[str, list[ProcessQueue]]:
        """The process queues grouped by topic, built once per pass (not once per topic: 1,000 topics x 8,000
        queues is 8 million steps)."""
        out: dict[str, list[ProcessQueue]] = {}
        for mq, pq in self._pqs.items():
            out.setdefault(mq.topic, []).append(pq)
        return out

    def _routes_changed(self) -> bool:
        """True when an owned queue left its route, or a route still missing (e.g. the retry topic) is due."""
        now = time.monotonic()
        by_topic = self._queues_by_topic()
        for topic in self._subscriptions:
            route = self.routes.cached(topic)
            if route is None and now - self._missing_route_tried.get(topic, 0.0) >= MISSING_ROUTE_RETRY_S:
                self._missing_route_tried[topic] = now
                return True
            owned = {pq.mq for pq in by_topic.get(topic, ())}
            if route is not None and not owned.issubset(route.subscribe_queues):
                return True
        return False

    async def _rebalance(self) -> None:
        async with self._rebalance_lock:
            self._last_full_rebalance = time.monotonic()
            memo: dict[str, list[str]] = {}  # one GET_CONSUMER_LIST_BY_GROUP per broker group per round
            by_topic = self._queues_by_topic()
            for topic, expression in list(self._subscriptions.items()):
                route = self.routes.cached(topic)
                if route is None:
                    try:
                        route = await self.routes.refresh(topic)
                    except MQClientError:
                        continue
                mqs = sorted(route.subscribe_queues)
                others = False
                if self.message_model is MessageModel.CLUSTERING:
                    cids = await consumer_ids(self.routes, self.remoting, self.group, topic, self.request_timeout_s,
                                              memo)
                    if cids is None:
                        continue
                    self._last_cids[topic] = cids
                    if self.client_id not in cids:
                        log.info("%s not yet in the consumer list of %s; skipping the rebalance", self.client_id, topic)
                        continue
                    mine = allocate_averagely(mqs, cids, self.client_id)
                    others = len(cids) > 1
                else:
                    mine = mqs
                await self._update_queues(topic, expression, set(mine), others, by_topic.get(topic, []))

    async def _update_queues(
        self, topic: str, expression: MessageSelector, mine: set[MessageQueue], others: bool,
        current: list[ProcessQueue],
    ) -> None:
        """``current``: ``topic``'s process queues when the round began (only this call changes them)."""
        if self._state != "started":
            return  # stop() owns the queues now
        gone = [pq for pq in current if self._pqs.get(pq.mq) is pq and (pq.mq not in mine or pq.dropped)]
        for pq in gone:
            pq.dropped = True
            if pq.task is not None:
                pq.task.cancel()
        if gone:
            await self._wait_idle(gone, self.drop_wait_s)
            for pq in gone:
                self._pqs.pop(pq.mq, None)
                off = pq.committable()
                if off >= 0:
                    self.offsets.update(pq.mq, off)
                    try:
                        await self.offsets.persist_all([pq.mq])
                    except MQClientError as exc:
                        log.warning("offset commit for released %s failed: %s", pq.mq, exc)
                self.offsets.remove(pq.mq)
            log.info("%s released %s", self.client_id, ", ".join(str(pq.mq) for pq in gone))
        added = sorted(mq for mq in mine if mq not in self._pqs)
        for mq in added:
            pq = self._pqs[mq] = ProcessQueue(mq, expression)
            delay = self.takeover_delay_s if others else 0.0
            pq.task = task = asyncio.get_running_loop().create_task(self._pull_loop(pq, delay), name=f"pull.{mq}")
            self._pull_tasks.add(task)
            task.add_done_callback(self._pull_task_done)
        if added:
            log.info("%s took %s", self.client_id, ", ".join(str(mq) for mq in added))

    def _pull_task_done(self, task: asyncio.Task) -> None:
        self._pull_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("pull task %s died: %r", task.get_name(), task.exception(), exc_info=task.exception())

    async def _wait_idle(self, pqs: list[ProcessQueue], timeout_s: float) -> None:
        waits = [pq.idle.wait() for pq in pqs if not pq.idle.is_set()]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), timeout_s)
            except TimeoutError:
                log.warning("consumption of released queues still running after %.1fs", timeout_s)

    @property
    def consumed(self) -> int:
        """Messages the listener accepted so far."""
        return self._consume.consumed if self._consume is not None else 0

    # pulling ----------------------------------------------------------------------------------------------
    async def _pull_loop(self, pq: ProcessQueue, start_delay_s: float) -> None:
        mq = pq.mq
        if start_delay_s > 0 and await self._svc.sleep(start_delay_s):
            return
        while pq.next_offset < 0 and not pq.dropped:
            try:
                async with self._offset_lookups:  # the queue pulls as soon as its own offset is known
                    if pq.dropped:
                        return
                    pq.next_offset = await start_offset(
                        self.offsets, self.routes, self.remoting, mq, self.consume_from_where,
                        self.consume_timestamp_ms, self.request_timeout_s)
                self.offsets.update(mq, pq.next_offset)
            except MQClientError as exc:
                log.warning("cannot read the start offset of %s: %s", mq, exc)
                if await self._svc.sleep(self.pull_retry_delay_s):
                    return
        clustering = self.message_model is MessageModel.CLUSTERING
        consume = self._consume
        assert consume is not None
        while not pq.dropped:
            await consume.wait_for_space()
            commit = pq.committable() if clustering else 0
            try:
                result = await self.pull_api.pull(
                    mq,
                    pq.next_offset,
                    max_nums=self.pull_batch_size,
                    subscription=pq.subscription,
                    timeout_s=self.pull_timeout_s,
                    suspend_ms=self.suspend_ms,
                    commit_offset=max(0, commit),
                )
            except MQClientError as exc:
                log.warning("pull of %s at %d failed: %s", mq, pq.next_offset, exc)
                if await self._svc.sleep(self.pull_retry_delay_s):
                    return
                continue
            if pq.dropped:
                return
            if result.status is PullStatus.FOUND and result.messages:
                consume.submit(pq, result.messages)
                if self.pull_interval_s and len(result.messages) < self.pull_batch_size:
                    await asyncio.sleep(self.pull_interval_s)  # caught up: let the next batch gather
            elif result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning("offset %d of %s is illegal; going on at %d", pq.next_offset, mq, result.next_begin_offset)
                self.offsets.update(mq, result.next_begin_offset)
            pq.next_offset = result.next_begin_offset
            if not pq.inflight:
                self.offsets.update(mq, pq.next_offset)

    # offsets ----------------------------------------------------------------------------------------------
    async def _persist_offsets(self) -> None:
        for mq, pq in list(self._pqs.items()):
            off = pq.committable()
            if off >= 0:
                self.offsets.update(mq, off)
        owned = list(self._pqs)
        if owned:
            await self.offsets.persist_all(owned)
