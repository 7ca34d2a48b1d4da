"""Producer: sends messages to topic queues on master brokers, coalescing concurrent sends into batches.

Why batch: a request costs the broker tens of µs (frame, header, dispatch, one store append, one answer) while
one more 1 KiB message in a request costs a few µs (spec/performance.md Part C). So sends are gathered:

- A topic has at most one *open batch*, bound to one queue. Every send joins the open batch until it holds its
  cap or ``max_batch_bytes``; it is then sealed at once, else ``linger_ms`` after it opened (0: at the end of
  the current event-loop iteration, so every send made in one iteration shares a request). The batches' states
  and every rule that moves them live in one pure state machine, ``client.send_batcher``; this module feeds it
  sends and answers, and is its one sender.
- The cap and the rule for a due batch below it come from ``client.batch_policy``: concurrent senders are
  spread over ``pipeline_depth`` requests (each capped at ``max_batch_messages``) so that the client and the
  broker work at the same time, and a partial batch waits while its broker already has ``pipeline_depth``
  requests in flight, so fragments merge back into full batches.
- The next open batch takes its queue from ``client.queue_choice``: round-robin over the queues of healthy
  masters, staying on one queue for up to ``sticky_queue_bytes`` or ``sticky_queue_ms`` while requests to it
  are still in flight.
- A sealed batch is one request on the broker's remoting connection (``client.rpc``; many requests in flight
  on one connection), SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320) as ``client.send_batch`` builds it.
  At most ``max_inflight_per_queue`` requests run per queue; sealed batches beyond that wait in order and go out
  as earlier requests of that queue finish.

Per message the hot path is: one future, one properties string (``Message.wire_properties``), one tuple and
three list appends. No task per message; one task and one body encoding per request. A message with a delay
level goes in a request of its own (RocketMQ refuses delays inside a batch).

Each sealed batch is sent, retried on transport failures and retryable refusals, and resolved to one outcome
for all its messages by ``client.send_retry`` (the outcomes are listed there).

The producer heartbeats (HEART_BEAT with its group) to the masters it sends to, at its first route and every
``heartbeat_interval_s``, and unregisters from them (UNREGISTER_CLIENT) when it stops.

Not thread-safe: use from the event loop that started it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable
from dataclasses import dataclass

from client.batch_policy import BatchPolicy
from client.errors import ClientStateError, MQClientError, NoRouteError, ProducerClosedError
from client.heartbeat import heartbeat_body, new_client_id, send_heartbeats, unregister
from client.lifecycle import Lifecycle
from client.message import Message, MessageQueue, SendResult
from client.namesrv import NamesrvClient
from client.queue_choice import QueueChoice
from client.route_cache import RouteCache, TopicRoute
from client.rpc import ClientRemoting
from client.send_batch import SendBatch, fail_waiting
from client.send_batcher import SendBatcher, lane_of
from client.send_retry import SendRetry
from client.trace import ProducerTrace, TraceDispatcher
from client.trace_codec import TRACE_PRODUCER_GROUP, TRACE_TOPIC
from common.service import Service
from remoting.message_codec import MessageCodecError


@dataclass(slots=True)
class ProducerStats:
    rpcs: int = 0  # send requests made (310 or 320), retries included
    messages: int = 0  # messages handed to send*/
    batches: int = 0  # sealed batches
    held: int = 0  # due batches that waited for a request to their broker to be answered (batch_policy)
    retries: int = 0  # requests that were retries of a failed batch
    failed: int = 0  # messages that ended in an error


class _TopicState:
    __slots__ = ("choice", "parked", "route", "route_task", "topic")

    def __init__(self, topic: str, choice: QueueChoice) -> None:
        self.topic = topic
        self.route: TopicRoute | None = None
        self.choice = choice
        self.parked: list[tuple[Message, asyncio.Future]] = []
        self.route_task: asyncio.Task | None = None

    def use(self, route: TopicRoute) -> None:
        """Send by ``route`` from now on; a new route starts the queue rotation over."""
        if route is not self.route:
            self.route = route
            self.choice.reset()

    def fail_parked(self, err: MQClientError) -> int:
        """Fail the first sends still waiting for the route with ``err``; how many were."""
        parked, self.parked = self.parked, []
        return fail_waiting((fut for _, fut in parked), err)


def _drop_exception(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


class Producer(Lifecycle):
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        send_timeout_s: float = 5.0,
        retry_times_when_send_failed: int = 2,
        max_batch_bytes: int = 1024 * 1024,
        max_batch_messages: int = 512,
        linger_ms: float = 0.0,
        max_inflight_per_queue: int = 2,
        pipeline_depth: int = 2,
        pipeline_min_batch: int = 16,
        sticky_queue_bytes: int = 128 * 1024,
        sticky_queue_ms: float = 20.0,
        default_topic_queue_nums: int = 4,
        avoid_failed_broker_s: float = 5.0,
        poll_name_server_interval_s: float = 30.0,
        heartbeat_interval_s: float = 30.0,
        dedup: bool = False,
        instance_name: str | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
        credentials: tuple[str, str] | None = None,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str = "",
    ) -> None:
        """``enable_trace=True`` (or a ``trace_topic``) sends a Pub trace record per answered send, in the
        background (``client.trace``), to ``trace_topic`` (default ``RMQ_SYS_TRACE_TOPIC``)."""
        if max_batch_messages < 1 or max_batch_bytes < 1:
            raise ValueError("max_batch_messages and max_batch_bytes must be positive")
        self.group = group
        self.send_timeout_s = send_timeout_s
        self.retry_times = max(0, retry_times_when_send_failed)
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_messages = max_batch_messages
        self.linger_s = max(0.0, linger_ms / 1000.0)
        self.max_inflight_per_queue = max(1, max_inflight_per_queue)
        self.default_topic_queue_nums = default_topic_queue_nums
        self.dedup = dedup
        self.sticky_queue_bytes = sticky_queue_bytes
        self.sticky_queue_s = max(0.0, sticky_queue_ms / 1000.0)
        self.stats = ProducerStats()
        self.policy = BatchPolicy(depth=pipeline_depth, max_batch=max_batch_messages, min_batch=pipeline_min_batch)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.client_id = new_client_id(instance_name)
        self.remoting = ClientRemoting(avoid_failed_s=avoid_failed_broker_s, name=f"producer.{group}",
                                      credentials=credentials,
                                      tls=tls, tls_ca=tls_ca)
        self.namesrv = NamesrvClient(namesrv_addr, remoting=self.remoting, timeout_s=send_timeout_s)
        self.routes = RouteCache(
            self.namesrv,
            self.remoting.health,
            poll_interval_s=poll_name_server_interval_s,
            default_topic_queue_nums=default_topic_queue_nums,
        )
        self._topics: dict[str, _TopicState] = {}
        self.batcher = SendBatcher(
            self.policy,
            max_batch_bytes=max_batch_bytes,
            max_inflight_per_queue=self.max_inflight_per_queue,
            send_timeout_s=send_timeout_s,
            pick_queue=self._pick_queue,
            send=self._send,
            schedule_due=self._schedule_due,
            on_seal=self._on_seal,
            clock=time.monotonic,
        )
        self.sender = SendRetry(
            group=group,
            remoting=self.remoting,
            routes=self.routes,
            counters=self.stats,
            retry_times=self.retry_times,
            send_timeout_s=send_timeout_s,
            default_topic_queue_nums=default_topic_queue_nums,
            dedup=dedup,
            healthy=self._healthy,
            requeue=self._requeue,
            on_master=self._on_master,
        )
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._svc = Service(f"producer.{group}")
        self._heartbeat_addrs: set[str] = set()
        self._heartbeat_task: asyncio.Task | None = None
        self._state = "created"
        self.namesrv_addr = namesrv_addr
        self.trace: ProducerTrace | None = None
        if enable_trace or trace_topic:
            sender = Producer(TRACE_PRODUCER_GROUP, namesrv_addr, send_timeout_s=send_timeout_s)
            self.trace = ProducerTrace(TraceDispatcher(sender, trace_topic or TRACE_TOPIC), group,
                                       self.routes.find_broker_address_in_publish)

    # lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> Producer:
        if self._state == "started":
            return self
        if self._state == "stopped":
            raise ClientStateError(f"producer {self.group}", "stopped")
        self._loop = asyncio.get_running_loop()
        self.routes.start()
        await self._svc.start()
        self._svc.run_every("heartbeat", self.heartbeat_interval_s, self._heartbeat)
        if self.trace is not None:
            await self.trace.dispatcher.start()
        self._state = "started"
        return self

    async def stop(self, timeout_s: float | None = None) -> None:
        """Send everything already accepted (within ``timeout_s``, default send_timeout_s + 1), then close."""
        if not self._begin_stop():
            return
        deadline = time.monotonic() + (self.send_timeout_s + 1 if timeout_s is None else timeout_s)
        while True:  # parked first sends may open new batches once their route arrives: loop until quiet
            self.batcher.seal_all()
            pending = [t for t in self._tasks if not t.done()]
            pending += [ts.route_task for ts in self._topics.values() if ts.route_task is not None]
            remaining = deadline - time.monotonic()
            if not pending or remaining <= 0:
                break
            await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        still = [t for t in self._tasks if not t.done()]
        still += [ts.route_task for ts in self._topics.values() if ts.route_task is not None]
        for t in still:
            t.cancel()
        if still:
            await asyncio.wait(still, timeout=1.0)
        closed = ProducerClosedError()
        for batch in self.batcher.abandon():  # every held batch was an open one, sealed above
            self._fail(batch, closed)
        for ts in self._topics.values():
            ts.fail_parked(closed)
        self._state = "stopped"
        await self._svc.stop(timeout_s=1.0)
        await unregister(
            self.remoting,
            self._master_addrs(),
            self.client_id,
            producer_group=self.group,
            timeout_s=min(self.send_timeout_s, 1.0),
        )
        await self.routes.stop()
        await self.remoting.close()
        if self.trace is not None:  # after the last answers, so their Pub records go too
            await self.trace.dispatcher.stop()

    # sending ----------------------------------------------------------------------------------------------
    def send(self, msg: Message) -> Awaitable[SendResult]:
        """``await producer.send(msg)``: a SendResult (stored, with its SendStatus) or an MQClientError.

        The message is queued at the call (it is the future of ``send_async``), so no coroutine is made per send.
        """
        return self.send_async(msg)

    def send_oneway(self, msg: Message) -> None:
        """Send without waiting for (or reporting) the outcome."""
        self.send_async(msg).add_done_callback(_drop_exception)

    def send_async(self, msg: Message) -> asyncio.Future:
        """Queue ``msg`` for sending; the future resolves to its SendResult or fails with an MQClientError."""
        loop = self._loop
        if self._state != "started" or loop is None:
            raise ClientStateError(f"producer {self.group}", self._state)
        fut = loop.create_future()
        self.stats.messages += 1
        if self.trace is not None:
            self.trace.watch(msg, fut)
        return self._enqueue(msg, fut)

    def _enqueue(self, msg: Message, fut: asyncio.Future) -> asyncio.Future:
        ts = self._topics.get(msg.topic)
        if ts is None or ts.route is None:
            self._park(msg, fut)
            return fut
        try:
            props = msg.wire_properties(int(time.time() * 1000)).encode()
        except MessageCodecError as exc:
            self.stats.failed += 1
            fut.set_exception(
                MQClientError(
                    f"message to {msg.topic} cannot be sent: {exc.message}",
                    hint="remove \\x01 and \\x02 from property names and values",
                )
            )
            return fut
        try:
            self.batcher.add(msg.topic, (msg.flag, msg.body, props), msg.msg_id, fut, wait=msg.wait_store_msg_ok,
                             solo=msg.delay_level > 0)
        except NoRouteError:  # no queue for a new batch: the route lost its last master (a failover under way)
            ts.route = None
            self._park(msg, fut)
        except MQClientError as exc:
            self.stats.failed += 1
            fut.set_exception(exc)
        return fut

    # the batcher's hooks ----------------------------------------------------------------------------------
    def _pick_queue(self, topic: str) -> MessageQueue:
        """The queue of a new batch of ``topic`` (``client.queue_choice``); NoRouteError when there is none."""
        ts = self._topics[topic]
        cached = self.routes.cached(topic)
        if cached is not None:
            ts.use(cached)
        route = ts.route
        assert route is not None
        mq = ts.choice.pick(route.publish_queues, self._healthy, self.batcher.in_flight, self.max_inflight_per_queue)
        if mq is None:
            raise NoRouteError(topic, "no writable queue on a master broker")
        return mq

    def _healthy(self, broker_name: str) -> bool:
        addr = self.routes.find_broker_address_in_publish(broker_name)
        return addr is not None and self.remoting.health.healthy(addr)

    def _schedule_due(self, batch: SendBatch) -> None:
        loop = self._loop
        assert loop is not None
        if self.linger_s > 0:
            loop.call_later(self.linger_s, self._due, batch)
        else:
            loop.call_soon(self._due, batch)

    def _due(self, batch: SendBatch) -> None:
        if self.batcher.due(batch):
            self.stats.held += 1

    def _on_seal(self, batch: SendBatch) -> None:
        self.stats.batches += 1
        self._topics[batch.mq.topic].choice.account(batch.mq, batch.nbytes)

    def _send(self, batch: SendBatch) -> None:
        """The one sender: a task per sealed batch runs its request and retries."""
        loop = self._loop
        assert loop is not None
        task = loop.create_task(self._run_batch(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_batch(self, batch: SendBatch) -> None:
        try:
            err = await self.sender.send(batch)
            if err is not None:
                self._fail(batch, err)
        except asyncio.CancelledError:  # stop() ran out of time
            self._fail(batch, ProducerClosedError())
            raise
        except Exception as exc:  # never leave a caller waiting
            err = exc if isinstance(exc, MQClientError) else MQClientError(f"send failed: {exc!r}")
            self._fail(batch, err)
        finally:  # a retry may have moved the request; its slot stays where the batcher took it (batch.mq)
            if self.batcher.finished(batch):  # after the senders this batch just completed had their turn to join
                asyncio.get_running_loop().call_soon(self.batcher.release_held, lane_of(batch))

    def _requeue(self, failed: MessageQueue) -> MessageQueue:
        """The next queue of ``failed``'s topic away from its broker (``failed`` itself when there is none)."""
        ts = self._topics[failed.topic]
        route = self.routes.cached(ts.topic) or ts.route
        if route is None or not route.publish_queues:
            return failed
        ts.use(route)
        return ts.choice.rotate(route.publish_queues, self._healthy, avoid_broker=failed.broker_name) or failed

    def _fail(self, batch: SendBatch, err: MQClientError) -> None:
        self.stats.failed += fail_waiting(batch.futures, err)

    def _on_master(self, addr: str) -> None:
        if addr not in self._heartbeat_addrs and self._state == "started":
            self._heartbeat_now()  # a new master: it learns this producer group now (transaction checks)

    # first send to a topic --------------------------------------------------------------------------------
    def _park(self, msg: Message, fut: asyncio.Future) -> None:
        ts = self._topics.get(msg.topic)
        if ts is None:
            choice = QueueChoice(self.sticky_queue_bytes, self.sticky_queue_s)
            ts = self._topics[msg.topic] = _TopicState(msg.topic, choice)
        ts.parked.append((msg, fut))
        if ts.route_task is None:
            loop = self._loop
            assert loop is not None
            ts.route_task = loop.create_task(self._fetch_route(ts), name=f"producer.route.{msg.topic}")

    async def _fetch_route(self, ts: _TopicState) -> None:
        """The first route of a topic, or a writable one again after its last master left it: parked sends wait for
        it up to ``send_timeout_s`` (a controller-mode failover names the new master well within that)."""
        try:
            route = await self.routes.get(ts.topic, allow_default=True)
            if not route.publish_queues:
                route = await self.routes.wait_writable(ts.topic, self.send_timeout_s) or route
            if not route.publish_queues:
                raise NoRouteError(ts.topic, "no writable queue on a master broker")
        except Exception as exc:
            err = exc if isinstance(exc, MQClientError) else MQClientError(f"route lookup failed: {exc!r}")
            self.stats.failed += ts.fail_parked(err)  # ts.route stays None: the next send asks the nameserver again
            return
        finally:
            ts.route_task = None
        ts.route = route
        parked, ts.parked = ts.parked, []
        for msg, fut in parked:
            if not fut.done():
                self._enqueue(msg, fut)
        if not self._master_addrs() <= self._heartbeat_addrs and self._state == "started":
            self._heartbeat_now()

    # heartbeats -------------------------------------------------------------------------------------------
    def _master_addrs(self) -> set[str]:
        """The masters of the groups this producer sends to (the brokers that heartbeat and unregister go to)."""
        return self.routes.addrs_of(self._topics, masters_only=True)

    def _heartbeat_now(self) -> None:
        """Heartbeat at once (a new master appeared), unless a heartbeat is already on its way."""
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = self._svc.spawn("heartbeat.now", self._heartbeat())

    async def _heartbeat(self) -> None:
        addrs = self._master_addrs()
        self._heartbeat_addrs |= addrs
        if addrs:
            body = heartbeat_body(self.client_id, producer_groups=[self.group])
            await send_heartbeats(self.remoting, addrs, body, self.send_timeout_s)
