"""One request of the producer: the messages it carries to one queue, its encoding, and their outcome.

A batch of one message is SEND_MESSAGE_V2 (310) with the message's body; more are SEND_BATCH_MESSAGE (320) with
the body from ``remoting.message_codec.encode_batch``. The V2 header carries the batch's WAIT (messages that
differ in ``wait_store_msg_ok`` go in different batches) and, for a dedup producer, pyrmq's ``dedup=true`` ext
field. Every message of a batch shares its outcome: one SendResult each (its own msgId, offset id and queue
offset) or the same error.

``client.send_batcher`` decides when a batch opens and seals and when it may go out (its ``BatchState``); the
producer (client/producer.py) sends it and ``client.send_retry`` retries it; this module holds the batch, builds its
request and resolves its sends. Not thread-safe: the producer uses it from its event loop.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable

from client.errors import MQClientError
from client.message import MessageQueue, SendResult, SendStatus
from remoting.codes import RequestCode
from remoting.headers import INT_MAX, INT_MIN, parse_int
from remoting.message_codec import encode_batch
from remoting.message_headers import SendHeader

WAIT_FALSE = "WAIT\x01false"


class BatchState(enum.Enum):
    """Where a batch is in ``client.send_batcher`` (its docstring says what moves it)."""

    OPEN = "open"  # takes sends, not due yet
    HELD = "held"  # due, still takes sends, waits for its broker to answer a request
    WAITING = "waiting"  # sealed, waits for a request slot of its queue
    IN_FLIGHT = "in_flight"  # its request (and retries) run
    DONE = "done"  # answered, failed or abandoned


class SendBatch:
    __slots__ = (
        "body",
        "cap",
        "code",
        "deadline",
        "entries",
        "ext",
        "futures",
        "ids",
        "mq",
        "nbytes",
        "state",
        "wait",
    )

    def __init__(self, mq: MessageQueue, deadline: float, cap: int, wait: bool) -> None:
        self.mq = mq
        self.cap = cap  # most messages this batch takes (batch_policy.cap at opening)
        self.wait = wait  # the request's WAIT: every message of a batch shares it
        self.entries: list[tuple[int, bytes, bytes]] = []  # (flag, body, properties) for encode_batch
        self.ids: list[str] = []
        self.futures: list[asyncio.Future] = []
        self.nbytes = 0
        self.deadline = deadline
        self.state = BatchState.OPEN
        self.code = 0  # the request code and header, built once at the first attempt (retries change queueId)
        self.ext: dict[str, str] | None = None
        self.body: bytes = b""

    def build_request(self, producer_group: str, default_topic_queue_nums: int, dedup: bool) -> None:
        """Set the request's code, header and body: 310 for one message, else 320 with the codec's batch body.
        MessageCodecError when the messages cannot be encoded."""
        entries = self.entries
        if len(entries) == 1:
            flag, body, props = entries[0]
            self.code = RequestCode.SEND_MESSAGE_V2
            self.body = body
            properties = props.decode() if self.wait else f"{props.decode()}\x02{WAIT_FALSE}"
        else:
            flag = 0
            self.code = RequestCode.SEND_BATCH_MESSAGE
            self.body = encode_batch(entries)
            properties = "" if self.wait else WAIT_FALSE
        self.ext = SendHeader(
            producer_group=producer_group,
            topic=self.mq.topic,
            default_topic_queue_nums=default_topic_queue_nums,
            queue_id=self.mq.queue_id,
            flag=flag,
            properties=properties,
            batch=len(entries) > 1,
            broker_name=self.mq.broker_name,
            dedup=dedup,
        ).to_v2()

    def complete(self, mq: MessageQueue, ext: dict[str, str], status: SendStatus) -> None:
        """Resolve every waiting send from SendMessageResponseHeader (spec §3.6): ``msgId`` (offset ids,
        comma-joined), ``queueId``, ``queueOffset`` (of the first message)."""
        try:
            queue_id = parse_int(ext.get("queueId", mq.queue_id), INT_MIN, INT_MAX)
            base = parse_int(ext.get("queueOffset", -1))
        except ValueError:
            queue_id, base = mq.queue_id, -1
        if queue_id != mq.queue_id:
            mq = MessageQueue(mq.topic, mq.broker_name, queue_id)
        raw_ids = ext.get("msgId")
        offset_ids = raw_ids.split(",") if raw_ids else []
        n_ids = len(offset_ids)
        ids = self.ids
        for i, fut in enumerate(self.futures):
            if not fut.done():
                fut.set_result(
                    SendResult(status, ids[i], offset_ids[i] if i < n_ids else "", mq, base + i if base >= 0 else -1)
                )


def fail_waiting(futures: Iterable[asyncio.Future], err: MQClientError) -> int:
    """Fail every send whose future is not done yet with ``err``; how many were."""
    failed = 0
    for fut in futures:
        if not fut.done():
            failed += 1
            fut.set_exception(err)
    return failed
