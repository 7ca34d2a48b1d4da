"""Consumption for the PushConsumer (RocketMQ's ConsumeMessageConcurrentlyService).

Pull tasks ``submit`` messages; ``concurrency`` worker tasks call the listener with lists of up to
``batch_max_size`` messages. ``inflight`` counts messages submitted and not yet consumed; pull tasks call
``wait_for_space()`` before pulling, so at most ``max_inflight`` (plus one pull batch per queue) are held.

Outcomes: CONSUME_SUCCESS marks the messages done in their ProcessQueue (so the committable offset can pass
them). RECONSUME_LATER, an exception or None: in clustering mode each message is sent back to its broker group's
master with CONSUMER_SEND_MSG_BACK (36; delay level 0: the broker picks 3 + reconsumeTimes and moves it to the DLQ
after the group's retryMaxTimes, or ``max_reconsume_times`` when set). When that fails, the message is sent as a
new message to ``%RETRY%<group>`` on any reachable master, as RocketMQ's consumer does (properties RETRY_TOPIC,
ORIGIN_MESSAGE_ID, DELAY = 3 + reconsumeTimes; header reconsumeTimes and maxReconsumeTimes). A message whose
send-back failed both ways stays in flight and is consumed again locally after ``local_retry_delay_s``, its
reconsumeTimes raised by one (as RocketMQ does). Broadcasting messages are not retried (RocketMQ drops them with
a warning). Messages of a dropped queue that did not start are skipped: they stay below the
queue's committable offset, so its next owner delivers them.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable

from client.errors import BrokerError, MQClientError
from client.message import SEND_STATUS_BY_CODE, MessageExt
from client.process_queue import ProcessQueue
from client.route_cache import MASTER_ID, RouteCache
from client.rpc import ClientRemoting, command
from client.trace import ConsumeTrace
from client.trace_codec import ConsumeReturnType
from remoting.codes import RequestCode
from remoting.message_codec import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    RETRY_GROUP_TOPIC_PREFIX,
    properties_to_string,
)
from remoting.message_headers import SendHeader

log = logging.getLogger(__name__)


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


def _return_type(status: object) -> ConsumeReturnType:
    if status is ConsumeStatus.CONSUME_SUCCESS:
        return ConsumeReturnType.SUCCESS
    if status is None:
        return ConsumeReturnType.RETURNNULL
    if status is ConsumeReturnType.EXCEPTION:
        return ConsumeReturnType.EXCEPTION
    return ConsumeReturnType.FAILED


Listener = Callable[[list[MessageExt]], Awaitable[ConsumeStatus] | ConsumeStatus]


class ConsumeService:
    def __init__(
        self,
        group: str,
        listener: Listener,
        routes: RouteCache,
        remoting: ClientRemoting,
        *,
        broadcasting: bool,
        concurrency: int,
        batch_max_size: int,
        max_inflight: int,
        max_reconsume_times: int,
        local_retry_delay_s: float,
        request_timeout_s: float,
    ) -> None:
        self.group = group
        self.listener = listener
        self.routes = routes
        self.remoting = remoting
        self.broadcasting = broadcasting
        self.concurrency = max(1, concurrency)
        self.batch_max_size = max(1, batch_max_size)
        self.max_inflight = max(1, max_inflight)
        self.max_reconsume_times = max_reconsume_times
        self.local_retry_delay_s = local_retry_delay_s
        self.request_timeout_s = request_timeout_s
        self.inflight = 0
        self.consumed = 0  # messages the listener accepted
        self._queue: asyncio.Queue[tuple[ProcessQueue, list[MessageExt]]] = asyncio.Queue()
        self._space = asyncio.Event()
        self._space.set()
        self._workers: list[asyncio.Task] = []
        self._running = False
        self.trace: ConsumeTrace | None = None  # set by a traced PushConsumer

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._running = True
        self._workers = [
            loop.create_task(self._worker(), name=f"consumer.{self.group}.consume.{i}") for i in range(self.concurrency)
        ]

    async def stop(self) -> None:
        self._running = False
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    async def wait_for_space(self) -> None:
        while self.inflight >= self.max_inflight:
            self._space.clear()
            await self._space.wait()

    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        if pq.mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            for m in messages:  # the listener sees the original topic (RocketMQ resetRetryTopic)
                real = m.properties.get(PROPERTY_RETRY_TOPIC)
                if real:
                    m.topic = real
        pq.add([m.queue_offset for m in messages])
        self.inflight += len(messages)
        size = self.batch_max_size
        put = self._queue.put_nowait
        if size == 1:
            for m in messages:
                put((pq, [m]))
        else:
            for i in range(0, len(messages), size):
                put((pq, messages[i : i + size]))

    def _release(self, n: int) -> None:
        self.inflight -= n
        if self.inflight < self.max_inflight:
            self._space.set()

    async def _worker(self) -> None:
        listener = self.listener
        while True:
            pq, msgs = await self._queue.get()
            n = len(msgs)
            if pq.dropped:
                self._release(n)
                continue
            pq.begin_consume(n)
            trace = self.trace
            ctx = trace.before(msgs) if trace is not None else None
            try:
                try:
                    status = listener(msgs)
                    if inspect.isawaitable(status):
                        status = await status
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("listener of %s failed on %d messages; reconsuming later", self.group, n)
                    status = ConsumeReturnType.EXCEPTION
                if trace is not None:
                    trace.after(ctx, _return_type(status))
                if not isinstance(status, ConsumeStatus):
                    status = ConsumeStatus.RECONSUME_LATER
                if status is ConsumeStatus.CONSUME_SUCCESS:
                    done = msgs
                    self.consumed += n
                elif self.broadcasting:
                    log.warning("broadcast consumer of %s asked to reconsume %d messages; dropped", self.group, n)
                    done = msgs
                else:
                    done, again = await self._send_back(pq, msgs)
                    if again:
                        self._retry_locally(pq, again)
                pq.done([m.queue_offset for m in done])
                self._release(len(done))
            finally:
                pq.end_consume(n)

    async def _send_back(self, pq: ProcessQueue, msgs: list[MessageExt]) -> tuple[list[MessageExt], list[MessageExt]]:
        sent: list[MessageExt] = []
        failed: list[MessageExt] = []
        for m in msgs:
            ok = await self._consumer_send_msg_back(pq, m) or await self._send_to_retry_topic(m)
            (sent if ok else failed).append(m)
        return sent, failed

    async def _consumer_send_msg_back(self, pq: ProcessQueue, m: MessageExt) -> bool:
        """CONSUMER_SEND_MSG_BACK to the master of the message's group; False when it did not take it."""
        addr = self.routes.find_broker_address_in_publish(pq.mq.broker_name)
        if addr is None or not self.remoting.health.healthy(addr):
            return False
        ext = {
            "offset": str(m.physical_offset),
            "group": self.group,
            "delayLevel": "0",
            "originMsgId": m.msg_id,
            "originTopic": m.topic,
            "unitMode": "false",
            "bname": pq.mq.broker_name,
        }
        if self.max_reconsume_times > 0:
            ext["maxReconsumeTimes"] = str(self.max_reconsume_times)
        try:
            await self.remoting.call(
                addr,
                RequestCode.CONSUMER_SEND_MSG_BACK,
                ext,
                timeout_s=self.request_timeout_s,
                what=f"CONSUMER_SEND_MSG_BACK {pq.mq}@{m.queue_offset}",
            )
        except BrokerError as exc:
            log.warning("%s; sending the message to %s%s instead", exc, RETRY_GROUP_TOPIC_PREFIX, self.group)
            return False
        except MQClientError as exc:
            log.debug("%s", exc)
            return False
        return True

    async def _send_to_retry_topic(self, m: MessageExt) -> bool:
        """RocketMQ's fallback: a new message to ``%RETRY%<group>`` (needs its route) on any reachable master."""
        topic = RETRY_GROUP_TOPIC_PREFIX + self.group
        route = self.routes.cached(topic)
        if route is None:
            return False
        props = dict(m.properties)
        props.pop(PROPERTY_WAIT_STORE_MSG_OK, None)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, m.msg_id)
        props[PROPERTY_RETRY_TOPIC] = m.topic
        props[PROPERTY_DELAY_TIME_LEVEL] = str(3 + m.reconsume_times)
        props.setdefault(PROPERTY_UNIQ_KEY, m.msg_id)
        for mq in route.publish_queues:
            addr = route.broker_addrs.get(mq.broker_name, {}).get(MASTER_ID)
            if addr is None or not self.remoting.health.healthy(addr):
                continue
            header = SendHeader(
                producer_group=self.group,
                topic=topic,
                queue_id=mq.queue_id,
                sys_flag=m.sys_flag,
                flag=m.flag,
                properties=properties_to_string(props),
                reconsume_times=m.reconsume_times + 1,
                max_reconsume_times=self.max_reconsume_times if self.max_reconsume_times > 0 else 16,
                broker_name=mq.broker_name,
                timeout_millis=int(self.request_timeout_s * 1000),
            )
            request = command(RequestCode.SEND_MESSAGE_V2, header.to_v2(), m.body)
            try:
                resp = await self.remoting.invoke(addr, request, self.request_timeout_s, f"send to {mq}")
            except MQClientError as exc:
                log.debug("%s", exc)
                continue
            if resp.code in SEND_STATUS_BY_CODE:
                return True
            log.warning("%s", BrokerError(resp.code, resp.remark or "", addr, request=f"send to {mq}"))
        return False

    def _retry_locally(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        def again() -> None:
            if self._running:
                self._queue.put_nowait((pq, msgs))

        for m in msgs:
            m.reconsume_times += 1
        asyncio.get_running_loop().call_later(self.local_retry_delay_s, again)
        log.warning(
            "send-back of %d messages of %s failed; consuming them again in %.1fs",
            len(msgs),
            pq.mq,
            self.local_retry_delay_s,
        )
