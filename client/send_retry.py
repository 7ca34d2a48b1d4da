"""One sealed batch's request and its retries: which master it goes to, when it is retried on which queue, and
what each answer means for its messages. Its own module so the producer's batching (``client.send_batcher``) and
its failover rules can each be read and changed alone; the producer (client/producer.py) runs one ``SendRetry``
per sealed batch and fails the batch with the error it returns.

Outcomes, per message (all messages of a batch share one):
- SUCCESS / FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE: a SendResult with that
  SendStatus. The message is stored; it is never retried or hidden. Each request carries the time left until
  ``send_timeout_s`` (pyrmq's ``timeoutMillis`` field), so the broker answers its flush or slave status before
  the producer would give up; the default of 5 s leaves room for a broker's whole 3 s slave wait (RocketMQ's
  3 s default equals it, and a paused slave then showed as RequestTimeout instead of FLUSH_SLAVE_TIMEOUT).
- transport failure (unreachable, no answer in time): the broker is avoided for a few seconds and the batch is
  retried on a queue of another broker group, up to ``retry_times_when_send_failed`` times within ``send_timeout_s``.
  A batch that timed out may have been stored: the retry keeps each message's UNIQ_KEY, and with
  ``dedup=True`` the broker stores a UNIQ_KEY it saw within sendDedupWindowSeconds only once; such a producer
  retries transport failures on the same queue, so a retry is idempotent (and fails if that group stays down).
- a refusal RocketMQ's producer retries on another broker (TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR,
  NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT; spec §1.6 ``retryResponseCodes``) or SYSTEM_BUSY: retried the
  same way after a route refresh; other codes fail with BrokerError carrying the code and the broker's remark.
  A stored-but-weak answer from a fenced controller-mode master ("fenced: " in its remark) refreshes the route at
  once, so the next sends find the master elected in its place instead of waiting for the 30 s poll.

Not thread-safe: the producer uses it from its event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from client.errors import BrokerError, MQClientError, NoRouteError, RequestTimeout
from client.message import SEND_STATUS_BY_CODE, MessageQueue
from client.route_cache import RouteCache
from client.rpc import ClientRemoting, command
from client.send_batch import SendBatch
from remoting.codes import ResponseCode
from remoting.message_codec import MessageCodecError
from remoting.message_headers import TIMEOUT_FIELD

log = logging.getLogger("client.producer")  # the producer's logger: its retry warnings keep the name they had

# A controller-mode master that may have been replaced says so in its answer's remark (broker/controller_mode/fence.py)
FENCED = "fenced: "

# RocketMQ's DefaultMQProducer.retryResponseCodes, plus SYSTEM_BUSY (the broker asks to come back later).
RETRY_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        204,  # NO_BUYER_ID
        205,  # NOT_IN_CURRENT_UNIT
        ResponseCode.SYSTEM_BUSY,
    }
)


class SendCounters(Protocol):
    """What ``SendRetry`` counts (the producer's ProducerStats)."""

    rpcs: int  # send requests made, retries included
    retries: int  # requests that were retries of a failed batch


class SendRetry:
    """Sends sealed batches of one producer group, each with its retries (see the module docstring).

    ``healthy(broker_name)``: the group's master is reachable; ``requeue(failed)``: the next queue of that topic
    away from ``failed``'s broker (or ``failed`` itself when there is none); ``on_master(addr)``: a master the
    route named while a batch waited for one, before the batch is sent to it.
    """

    def __init__(
        self,
        *,
        group: str,
        remoting: ClientRemoting,
        routes: RouteCache,
        counters: SendCounters,
        retry_times: int,
        send_timeout_s: float,
        default_topic_queue_nums: int,
        dedup: bool,
        healthy: Callable[[str], bool],
        requeue: Callable[[MessageQueue], MessageQueue],
        on_master: Callable[[str], None],
    ) -> None:
        self.group = group
        self.remoting = remoting
        self.routes = routes
        self.counters = counters
        self.retry_times = retry_times
        self.send_timeout_s = send_timeout_s
        self.default_topic_queue_nums = default_topic_queue_nums
        self.dedup = dedup
        self.healthy = healthy
        self.requeue = requeue
        self.on_master = on_master

    async def send(self, batch: SendBatch) -> MQClientError | None:
        """Send ``batch`` until it completes (None) or its attempts or time run out (the error to fail it with)."""
        mq = batch.mq
        try:
            batch.build_request(self.group, self.default_topic_queue_nums, self.dedup)
        except MessageCodecError as exc:
            return MQClientError(f"batch to {mq} cannot be encoded: {exc.message}", hint=exc.hint)
        ext = batch.ext
        assert ext is not None
        what = f"send of {len(batch.futures)} messages to {{}}"
        last_error: MQClientError | None = None
        failed_addr: str | None = None  # the master whose transport just failed
        attempt = 0
        while attempt <= self.retry_times:
            remaining = batch.deadline - time.monotonic()
            if remaining <= 0:
                break
            addr = self.routes.find_broker_address_in_publish(mq.broker_name)
            if addr is None or addr == failed_addr:
                other = self.requeue(mq)
                if not self.dedup and other.broker_name != mq.broker_name and self.healthy(other.broker_name):
                    mq = other  # another group can take it now (classic mode's failover)
                    continue
                # The group has no master in the route, or only the one that just failed: wait for the route to name
                # another (a controller-mode failover registers one within about a second) for a share of the time
                # left, so one outage does not use up every attempt at once.
                share = remaining / (self.retry_times + 1 - attempt)
                addr = await self.routes.wait_for_master(mq.topic, mq.broker_name, failed_addr, share) or addr
                if addr is None:
                    last_error = NoRouteError(mq.topic, f"broker group {mq.broker_name} has no master in the route")
                    attempt += 1
                    mq = self.requeue(mq)
                    continue
                self.on_master(addr)
                remaining = batch.deadline - time.monotonic()
                if remaining <= 0:
                    break
            if attempt:
                self.counters.retries += 1
            attempt += 1
            self.counters.rpcs += 1
            ext["e"] = str(mq.queue_id)
            ext["n"] = mq.broker_name
            ext[TIMEOUT_FIELD] = str(int(remaining * 1000))
            request = what.format(mq)
            try:
                resp = await self.remoting.invoke(addr, command(batch.code, ext, batch.body), remaining, request)
            except MQClientError as exc:  # the transport failed (the address is marked unhealthy)
                last_error = exc
                failed_addr = addr
                log.warning("%s failed (%s); retrying elsewhere", request, exc.message)
                self.routes.refresh_soon(mq.topic)
                if not self.dedup:  # with dedup, stay on this broker group so its dedup window applies
                    mq = self.requeue(mq)
                continue
            failed_addr = None
            status = SEND_STATUS_BY_CODE.get(resp.code)
            if status is not None:
                if FENCED in (resp.remark or ""):
                    self.routes.refresh_soon(mq.topic)  # the route may already name its successor: next sends go there
                batch.complete(mq, resp.ext or {}, status)
                return None
            last_error = BrokerError(resp.code, resp.remark or "", addr, request=request, request_code=batch.code)
            if resp.code not in RETRY_CODES:
                break
            self.routes.refresh_soon(mq.topic)
            mq = self.requeue(mq)
        if last_error is None:
            last_error = RequestTimeout(mq.broker_name, self.send_timeout_s, request=what.format(mq))
        return last_error
