"""Message trace for the SDK (RocketMQ's AsyncTraceDispatcher and its send/consume hooks), opt-in.

A traced producer records a ``Pub`` record when a send is answered (cost, status, store host); a traced push
consumer records ``SubBefore`` for each message before the listener sees its batch and ``SubAfter`` after it
answered (cost per message, success, ConsumeReturnType). Records go to a bounded in-memory buffer, never to the
network on the caller's path: ``TraceDispatcher`` flushes the buffer every ``flush_interval_s`` (or at once when
``batch_records`` are waiting) as trace messages of up to 128 KB (``client.trace_codec.pack_texts``), sent by its own
producer (group ``PID_CLIENT_INNER_TRACE_PRODUCER``, not traced) to the trace topic, ``RMQ_SYS_TRACE_TOPIC`` by
default. A full buffer drops new records and counts them (``dropped``): a slow trace topic never slows sends or
consumption. A failed trace send is counted (``failed``) and not retried beyond the producer's own retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from client.message import Message, SendStatus, new_msg_id
from client.trace_codec import (
    DEFAULT_REGION,
    ConsumeReturnType,
    MessageType,
    TraceRecord,
    encode_record,
    pack_texts,
    pub_text,
    sub_after_text,
    sub_before_text,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 20_000
DEFAULT_BATCH_RECORDS = 500


class TraceSender(Protocol):
    async def start(self) -> object: ...

    async def stop(self, timeout_s: float | None = None) -> None: ...

    def send_async(self, msg: Message) -> asyncio.Future: ...


class TraceDispatcher:
    def __init__(
        self,
        sender: TraceSender,
        topic: str,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        batch_records: int = DEFAULT_BATCH_RECORDS,
        flush_interval_s: float = 0.1,
    ) -> None:
        self.sender = sender
        self.topic = topic
        self.max_pending = max(1, max_pending)
        self.batch_records = max(1, batch_records)
        self.flush_interval_s = flush_interval_s
        self.dropped = 0  # records refused by a full buffer
        self.sent = 0  # records in trace messages the trace topic stored
        self.failed = 0  # records in trace messages whose send failed
        self._pending: list[tuple[str, str, str]] = []  # (encoded record, msgId, keys)
        self._inflight: set[asyncio.Future] = set()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.sender.start()
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"trace.{self.topic}")

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Send what is buffered (within ``timeout_s``), then stop the trace producer."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.flush()
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=timeout_s)
        await self.sender.stop(timeout_s)

    def add(self, record: TraceRecord) -> None:
        self.add_text(encode_record(record), record.msg_id, record.keys)

    def add_text(self, text: str, msg_id: str, keys: str) -> None:
        """Buffer one encoded record (``client.trace_codec``'s ``*_text``) for the next flush."""
        pending = self._pending
        if len(pending) >= self.max_pending:
            self.dropped += 1
            return
        pending.append((text, msg_id, keys))
        if len(pending) >= self.batch_records and self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            try:
                await asyncio.wait_for(wake.wait(), self.flush_interval_s)
            except TimeoutError:
                pass
            wake.clear()
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        records, self._pending = self._pending, []
        for body, keys in pack_texts(records):
            n = body.count("\x02")
            try:
                fut = self.sender.send_async(Message(self.topic, body.encode(), keys=keys))
            except Exception as exc:  # the trace producer is stopped or the message cannot be encoded
                self.failed += n
                log.debug("trace send refused: %r", exc)
                continue
            self._inflight.add(fut)
            fut.add_done_callback(lambda f, n=n: self._done(f, n))

    def _done(self, fut: asyncio.Future, n: int) -> None:
        self._inflight.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            self.failed += n
            if not fut.cancelled():
                log.debug("trace send failed: %s", fut.exception())
        else:
            self.sent += n


def _now_ms() -> int:
    return int(time.time() * 1000)


class ProducerTrace:
    """The producer's hook: ``watch(msg, fut)`` at each send adds a Pub record once ``fut`` has its SendResult."""

    def __init__(self, dispatcher: TraceDispatcher, group: str, store_host_of: Callable[[str], str | None]) -> None:
        self.dispatcher = dispatcher
        self.group = group
        self.store_host_of = store_host_of

    def watch(self, msg: Message, fut: asyncio.Future) -> None:
        start = _now_ms()
        fut.add_done_callback(lambda f: self._pub(msg, start, f))

    def _pub(self, msg: Message, start_ms: int, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return  # RocketMQ traces answered sends only
        result = fut.result()
        keys = msg.keys if isinstance(msg.keys, str) else " ".join(msg.keys)
        try:
            text = pub_text(start_ms, DEFAULT_REGION, self.group, msg.topic, result.msg_id, msg.tags, keys,
                            self.store_host_of(result.message_queue.broker_name) or "", len(msg.body),
                            _now_ms() - start_ms, MessageType.DELAY if msg.delay_level > 0 else MessageType.NORMAL,
                            result.offset_msg_id, result.status is SendStatus.SEND_OK)
        except ValueError:  # cannot happen for a message the broker took (its fields are checked names/properties)
            return
        self.dispatcher.add_text(text, result.msg_id, keys)


class ConsumeTrace:
    """The push consumer's hook around each listener call: ``before`` then ``after`` with its outcome."""

    def __init__(self, dispatcher: TraceDispatcher, group: str) -> None:
        self.dispatcher = dispatcher
        self.group = group

    def before(self, msgs: list) -> tuple[str, int, list] | None:
        """SubBefore for each message (the trace topic's own messages are not traced); the context for after."""
        traced = [m for m in msgs if m.topic != self.dispatcher.topic]
        if not traced:
            return None
        request_id, now = new_msg_id(), _now_ms()
        add = self.dispatcher.add_text
        for m in traced:
            msg_id, keys = m.msg_id, m.keys
            try:
                add(sub_before_text(now, DEFAULT_REGION, self.group, request_id, msg_id, m.reconsume_times, keys),
                    msg_id, keys)
            except ValueError:  # a separator in a stored key: not traceable
                pass
        return request_id, now, traced

    def after(self, ctx: tuple[str, int, list] | None, code: ConsumeReturnType) -> None:
        if ctx is None:
            return
        request_id, start, traced = ctx
        now = _now_ms()
        cost = (now - start) // len(traced)  # RocketMQ reports the batch's time per message
        ok = code is ConsumeReturnType.SUCCESS
        add = self.dispatcher.add_text
        for m in traced:
            msg_id, keys = m.msg_id, m.keys
            try:
                add(sub_after_text(request_id, msg_id, cost, ok, keys, code, now), msg_id, keys)
            except ValueError:
                pass
