"""The chaos workload: background producers that record every send and its outcome, consumers that record every
read, and a drain of one node on its own. Everything goes through the SDK (client.Producer, PushConsumer,
PullConsumer), as an application would use it.

Writers are Jepsen processes: writer ``w`` sends ``w:seq`` bodies (seq 1, 2, ...) at a steady rate with a few
sends in flight, each with a fresh UNIQ_KEY it chose itself, so a send is in the ledger before it leaves. The
producer never retries (``retry_times_when_send_failed=0``): one send is one request, so its outcome is exactly
what the broker said, or UNKNOWN when it did not say (``classify``). Its timeout (5 s) is above the broker's
3 s slave wait, so a FLUSH_SLAVE_TIMEOUT reaches the ledger as a status rather than as a client timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

from client import (
    BrokerError,
    ClientStateError,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MQClientError,
    NoRouteError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendResult,
    SendStatus,
)
from client.message import new_msg_id
from harness.checker import Outcome, Read, Send, SendOk
from remoting.codes import ResponseCode
from remoting.message_codec import MessageCodecError, parse_offset_msg_id

log = logging.getLogger(__name__)

# Refusals that say the message was not stored (RocketMQ refuses these before the append). SYSTEM_ERROR is not
# one: it can come from a failure after the append, so it stays UNKNOWN.
DEFINITE_REFUSALS = frozenset({
    ResponseCode.SYSTEM_BUSY, ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.VERSION_NOT_SUPPORTED, ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.INVALID_PARAMETER,
})
WEAK_STATUSES = frozenset({SendStatus.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT,
                           SendStatus.SLAVE_NOT_AVAILABLE})


def classify(result: SendResult | BaseException) -> tuple[Outcome, int | None, str]:
    """(outcome, commitlog offset, detail) of one send: a SendResult or the exception the send ended with."""
    if isinstance(result, SendResult):
        try:
            offset: int | None = parse_offset_msg_id(result.offset_msg_id)[1]
        except MessageCodecError:
            offset = None
        outcome = Outcome.ACKED if result.status is SendStatus.SEND_OK else Outcome.WEAK
        return outcome, offset, result.status.value
    if isinstance(result, BrokerError) and result.code in DEFINITE_REFUSALS:
        return Outcome.FAILED, None, f"refused {result.code}"
    if isinstance(result, NoRouteError | ClientStateError):  # nothing was sent
        return Outcome.FAILED, None, type(result).__name__
    return Outcome.UNKNOWN, None, type(result).__name__


@dataclass
class Ledger:
    """What the workload saw: the checker's input, plus counters over time for the report."""

    sends: dict[str, Send] = field(default_factory=dict)
    reads: list[Read] = field(default_factory=list)
    max_read_offset: dict[str, int] = field(default_factory=dict)  # queue -> highest queue offset read
    acked_at: list[float] = field(default_factory=list)  # monotonic time of every ACKED outcome
    oks: list[SendOk] = field(default_factory=list)  # every SEND_OK with its broker and times (split-brain check)
    invoked_at: dict[str, float] = field(default_factory=dict)  # sends in flight: when they left

    def invoked(self, ident: str, writer: str, seq: int) -> None:
        self.sends[ident] = Send(ident, writer, seq, Outcome.UNKNOWN, None, "in flight")
        self.invoked_at[ident] = time.monotonic()

    def completed(self, ident: str, result: SendResult | BaseException) -> None:
        old = self.sends[ident]
        outcome, offset, detail = classify(result)
        self.sends[ident] = Send(ident, old.writer, old.seq, outcome, offset, detail)
        sent = self.invoked_at.pop(ident, 0.0)
        if outcome is Outcome.ACKED:
            now = time.monotonic()
            self.acked_at.append(now)
            if isinstance(result, SendResult) and offset is not None:  # the store host answered it
                (ip, port), _ = parse_offset_msg_id(result.offset_msg_id)
                self.oks.append(SendOk(result.message_queue.broker_name, f"{ip}:{port}", sent, now, ident, None, offset))

    def read(self, msg: MessageExt, node: str = "group") -> Read:
        queue = f"{msg.topic}:{msg.queue_id}"
        r = Read(msg.msg_id, queue, msg.queue_offset, node)
        if node == "group":
            self.reads.append(r)
            if msg.queue_offset > self.max_read_offset.get(queue, -1):
                self.max_read_offset[queue] = msg.queue_offset
        return r

    def acked_ids(self) -> set[str]:
        return {i for i, s in self.sends.items() if s.outcome is Outcome.ACKED}

    def unread_acked(self) -> set[str]:
        return self.acked_ids() - {r.id for r in self.reads}

    def acked_since(self, t: float) -> int:
        return sum(1 for a in self.acked_at if a >= t)


class Writers:
    """``writers`` producers, each sending ``rate`` messages per second with up to ``inflight`` unanswered."""

    def __init__(self, namesrv_addr: str, topic: str, ledger: Ledger, *, writers: int = 2, rate: float = 60.0,
                 inflight: int = 8, body_size: int = 1024, send_timeout_s: float = 5.0, tag: str = "w") -> None:
        self.namesrv_addr = namesrv_addr
        self.topic = topic
        self.ledger = ledger
        self.names = [f"{tag}{i}" for i in range(writers)]
        self.rate = rate
        self.inflight = inflight
        self.body_size = body_size
        self.send_timeout_s = send_timeout_s
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._seq: dict[str, int] = defaultdict(int)

    def start(self) -> None:
        self._stop.clear()
        self._tasks = [asyncio.create_task(self._write(w), name=f"chaos.writer.{w}") for w in self.names]

    async def stop(self) -> None:
        """Stop sending, and wait for the answers of what was sent (the producer's own deadline bounds it)."""
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _write(self, writer: str) -> None:
        producer = Producer(f"chaos-{writer}", self.namesrv_addr, send_timeout_s=self.send_timeout_s,
                            retry_times_when_send_failed=0, avoid_failed_broker_s=1.0,
                            poll_name_server_interval_s=2.0, instance_name=f"chaos-{writer}")
        await producer.start()
        slots = asyncio.Semaphore(self.inflight)
        loop = asyncio.get_running_loop()
        pad = b"." * max(0, self.body_size - 24)
        next_at = loop.time()
        try:
            while not self._stop.is_set():
                await slots.acquire()
                if self._stop.is_set():
                    slots.release()
                    break
                self._seq[writer] += 1
                seq = self._seq[writer]
                msg = Message(self.topic, f"{writer}:{seq}|".encode() + pad, msg_id=new_msg_id())
                self.ledger.invoked(msg.msg_id, writer, seq)
                try:
                    fut = producer.send_async(msg)
                except MQClientError as exc:
                    self.ledger.completed(msg.msg_id, exc)
                    slots.release()
                else:
                    fut.add_done_callback(self._done(msg.msg_id, slots))
                next_at += 1.0 / self.rate
                delay = next_at - loop.time()
                if delay > 0:  # the rate limit: wake up at the next send time, or at once when stopping
                    try:
                        await asyncio.wait_for(self._stop.wait(), delay)
                    except TimeoutError:
                        pass
                else:
                    next_at = loop.time()  # behind (sends were blocked): do not burst to catch up
        finally:
            await producer.stop()

    def _done(self, ident: str, slots: asyncio.Semaphore):
        def done(fut: asyncio.Future) -> None:
            slots.release()
            if fut.cancelled():
                self.ledger.completed(ident, asyncio.CancelledError())
            else:
                exc = fut.exception()
                self.ledger.completed(ident, exc if exc is not None else fut.result())

        return done


class Readers:
    """``consumers`` push consumers of one group from the first offset, recording every message they get."""

    def __init__(self, namesrv_addr: str, topic: str, group: str, ledger: Ledger, *, consumers: int = 2) -> None:
        self.ledger = ledger
        self.topic = topic
        self.consumers = []
        for i in range(consumers):
            c = PushConsumer(group, namesrv_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                             suspend_ms=1000, persist_interval_s=1.0, rebalance_interval_s=5.0,
                             membership_poll_interval_s=2.0, pull_retry_delay_s=0.5, takeover_delay_s=0.5,
                             poll_name_server_interval_s=2.0, avoid_failed_broker_s=1.0, request_timeout_s=3.0,
                             instance_name=f"chaos-reader-{i}")
            c.subscribe(topic)
            c.register_message_listener(self._listener)
            self.consumers.append(c)

    def _listener(self, msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            if m.topic == self.topic:
                self.ledger.read(m)
        return ConsumeStatus.CONSUME_SUCCESS

    async def start(self) -> None:
        for c in self.consumers:
            await c.start()

    async def stop(self) -> None:
        for c in self.consumers:
            try:
                await c.stop()
            except MQClientError as exc:  # a consumer stopping while its brokers are down: its offsets may not commit
                log.info("consumer stop: %s", exc)


@dataclass
class Drain:
    reads: list[Read]
    skipped: int = 0  # queue offsets the node answered for without a record (its commitlog file was deleted)


async def drain_node(namesrv_addr: str, topic: str, ledger: Ledger, node: str, *, group: str,
                     timeout_s: float = 60.0) -> Drain:
    """Every message of every queue of ``topic`` as the surviving node serves them, from offset 0 to the queue's
    max (a fresh group, no offset commit). Called when the master is gone, so the pulls land on the slave;
    a pull the master would have served counts as a failure of the drain (it raises).

    A slave answers a queue offset whose record it no longer has with PULL_RETRY_IMMEDIATELY or
    PULL_OFFSET_MOVED and ``nextBeginOffset`` = the same offset (RocketMQ's slave rule without
    offsetCheckInSlave), which a consumer would retry forever; the drain steps past such an offset (to the
    queue's min offset, or by one) and counts it in ``skipped``: the checker then sees those messages missing."""
    out = Drain([])
    deadline = time.monotonic() + timeout_s
    async with PullConsumer(group, namesrv_addr, request_timeout_s=3.0, avoid_failed_broker_s=1.0) as pc:
        for mq in await pc.fetch_subscribe_queues(topic):
            offset = 0
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"draining {topic} from {node}: not done within {timeout_s:.0f} s at "
                                       f"{mq} offset {offset}")
                try:
                    res = await pc.pull(mq, offset, 64, timeout_s=5.0)
                except MQClientError as exc:
                    log.info("drain of %s at %d: %s; retrying", mq, offset, exc)
                    await asyncio.sleep(0.2)  # polling the node until it answers, within the deadline
                    continue
                if res.status is PullStatus.FOUND:
                    if not res.from_slave:
                        raise AssertionError(f"{mq}@{offset} was served by {res.broker_addr}, not a slave")
                    out.reads.extend(ledger.read(m, node) for m in res.messages if m.topic == topic)
                    offset = res.next_begin_offset
                elif offset >= res.max_offset:
                    break
                elif res.status in (PullStatus.OFFSET_ILLEGAL, PullStatus.NO_MATCHED_MSG):
                    step = res.next_begin_offset if res.next_begin_offset > offset else max(res.min_offset, offset + 1)
                    log.info("drain of %s: %s at %d (min %d, next %d): going on at %d", mq, res.status.value,
                             offset, res.min_offset, res.next_begin_offset, step)
                    out.skipped += step - offset if res.next_begin_offset <= offset else 0
                    offset = step
                else:  # NO_NEW_MSG below the max: the slave has not dispatched it yet
                    await asyncio.sleep(0.1)
    return out
