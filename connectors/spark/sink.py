"""Batch and streaming writers of ``format("pyrmq")``: rows -> messages, idempotent across retries.

Exactly-once contents (spec §6.4, "idempotent producer"): every row gets a deterministic UNIQ_KEY and is sent
in a SEND_BATCH_MESSAGE (320) whose header carries pyrmq's ext field ``dedup=true``
(``remoting.message_headers.DEDUP_FIELD``); the broker stores a UNIQ_KEY once per topic within
``sendDedupWindowSeconds`` (600 s) and answers a repeat with the first result. A retried task, or a micro-batch
replayed after a driver crash, sends the same keys, so nothing is stored twice. Messages become visible when
``write()`` sends them, before Spark commits the batch: visibility is at-least-once, contents exactly-once.

The key of a row: 32 hex characters, blake2b-128 of ``(sinkId, batchId, partitionId, content, n)`` where
``content`` is the row's topic, body, keys, tags and properties and ``n`` counts earlier rows of the same task
with the same content. It does not depend on row order, so a replay whose shuffle delivers a partition's rows in
another order still produces the same keys. It needs the replay to put the same rows in the same partition,
which holds for this source and for hash-partitioned shuffles.

- ``sinkId``: the option, else the streaming query id (stable across restarts from one checkpoint), else (a
  batch write) a random id per write job, so task retries of one job deduplicate and a second job does not.
- Queue: ``crc32(keys or key) % len(publish queues)`` over the route's publish queues, so a replay reaches the
  same broker group (the window is per broker). A route change between attempt and replay can defeat this.

Sends go out ``sendBatchSize`` messages (at most ``MAX_BATCH_BYTES`` of bodies) per request, up to
``MAX_INFLIGHT`` at a time per task, and are retried on transport failures and retriable codes (SYSTEM_BUSY, also
used for "this key is being stored by an earlier request") until ``sendTimeoutSeconds``.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from client.route_cache import TopicRoute
from connectors.spark.broker_client import TransportError, client_for
from connectors.spark.errors import BrokerRefusal, OptionError, Unavailable
from connectors.spark.options import SinkOptions
from connectors.spark.schema import SINK_COLUMNS
from remoting.codes import SEND_OK_CODES, RequestCode, ResponseCode
from remoting.message_codec import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, encode_batch
from remoting.message_headers import SendHeader

log = logging.getLogger("pyrmq.spark")

MAX_INFLIGHT = 8
# Bodies per request, well under the broker's 4 MiB maxMessageSize (a batch body counts as one message there).
MAX_BATCH_BYTES = 1024 * 1024
_COLUMN_PROPS = frozenset({PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS})
_RETRY_CODES = {
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.SYSTEM_ERROR,
}


@dataclass
class SinkCommit(WriterCommitMessage):
    partition_id: int
    batch_id: str
    sink_id: str
    messages: int = 0
    not_replicated: int = 0  # stored on the master, slave not in sync (SLAVE_NOT_AVAILABLE/FLUSH_SLAVE_TIMEOUT)
    per_topic: dict[str, int] = field(default_factory=dict)


def check_sink_schema(schema, opts: SinkOptions) -> None:
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType

    names = schema.fieldNames()
    unknown = [n for n in names if n not in SINK_COLUMNS]
    if unknown:
        raise OptionError(
            "columns",
            f"{', '.join(unknown)} not used by the pyrmq sink",
            "select only " + "; ".join(f"{k}: {v}" for k, v in SINK_COLUMNS.items()),
        )
    types = {f.name: f.dataType for f in schema.fields}
    if "body" not in types or not isinstance(types["body"], (BinaryType, StringType)):
        raise OptionError(
            "columns",
            "a body column (binary or string) is required",
            'e.g. df.selectExpr("CAST(value AS BINARY) AS body")',
        )
    expect = {"tags": (StringType,), "topic": (StringType,), "keys": (StringType, ArrayType), "properties": (MapType,)}
    for name, allowed in expect.items():
        if name in types and not isinstance(types[name], allowed):
            raise OptionError(
                "columns", f"{name} is {types[name].simpleString()}", f"{name} must be {SINK_COLUMNS[name]}"
            )
    if opts.topic is None and "topic" not in types:
        raise OptionError("topic", "no topic option and no topic column", 'add .option("topic", "TopicA")')


def row_key(prefix: bytes, topic: str, body: bytes, keys: str, tags: str, props: list | None, n: int) -> str:
    """The UNIQ_KEY of a row: blake2b-128 over the task prefix, the row's content and its occurrence number."""
    h = hashlib.blake2b(b"%s%s\x00%d\x00" % (prefix, topic.encode(), len(body)), digest_size=16)
    h.update(body)
    tail = f"\x00{keys}\x00{tags}\x00"
    if props:
        tail += "".join(f"{k}\x01{v}\x02" for k, v in sorted(props, key=lambda kv: kv[0]))
    h.update(b"%s\x00%d" % (tail.encode(), n))
    return h.hexdigest().upper()


@dataclass
class _Batch:
    """The messages bound for one queue, as SEND_BATCH_MESSAGE entries (flag, body, properties)."""

    entries: list = field(default_factory=list)
    body_bytes: int = 0


class _Sender:
    """Batches messages per queue and keeps up to MAX_INFLIGHT SEND_BATCH_MESSAGE requests running; retries."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.client = client_for(opts.namesrv, opts.request_timeout_s, opts.tls)
        self.open: dict[tuple[str, str, int], _Batch] = {}
        self.inflight: deque = deque()
        self.sent = 0
        self.not_replicated = 0
        self.per_topic: dict[str, int] = {}
        self._queues: dict[str, tuple[TopicRoute, list]] = {}

    def route(self, topic: str) -> TopicRoute:
        route = self.client.route(topic)
        if not route.publish_queues:
            route = self.client.route(topic, max_age_s=0)
            if not route.publish_queues:
                raise Unavailable(f"sending to {topic}", "the route has no writable queue with a master", 0)
        return route

    def queues(self, topic: str) -> list:
        """The topic's publish queues in a fixed order (sorted once per route object)."""
        route = self.route(topic)
        cached = self._queues.get(topic)
        if cached is None or cached[0] is not route:
            cached = self._queues[topic] = (route, sorted(route.publish_queues))
        return cached[1]

    def add(self, topic: str, mq, body: bytes, keys: str, tags: str, props, uniq: str) -> None:
        k = (topic, mq.broker_name, mq.queue_id)
        batch = self.open.get(k)
        if batch is None:
            batch = self.open[k] = _Batch()
        p: dict[str, str] = {}
        if props:
            for name, value in props:
                if name not in _COLUMN_PROPS and value is not None:
                    p[name] = value
        if tags:
            p[PROPERTY_TAGS] = tags
        if keys:
            p[PROPERTY_KEYS] = keys
        p[PROPERTY_UNIQ_KEY] = uniq
        batch.entries.append((0, body, p))
        batch.body_bytes += len(body)
        if len(batch.entries) >= self.opts.send_batch_size or batch.body_bytes >= MAX_BATCH_BYTES:
            del self.open[k]
            self._start(k, self._request(k, batch), len(batch.entries), time.monotonic() + self.opts.send_timeout_s)

    def _request(self, k: tuple[str, str, int], batch: _Batch) -> tuple[dict[str, str], bytes]:
        """The V2 header (with ``dedup``) and the batch body; built once, resent unchanged on retries."""
        header = SendHeader(
            producer_group=self.opts.producer_group,
            topic=k[0],
            queue_id=k[2],
            batch=True,
            broker_name=k[1],
            dedup=True,
        )
        return header.to_v2(), encode_batch(batch.entries)

    def _start(self, k, request, count: int, deadline: float) -> None:
        while len(self.inflight) >= MAX_INFLIGHT:
            self._finish_one()
        addr = self.client.master_addr(k[0], k[1])
        if addr is None:
            self.client.route(k[0], max_age_s=0)
            addr = self.client.master_addr(k[0], k[1])
        ext, body = request
        fut = (
            None
            if addr is None
            else self.client.submit(
                addr, RequestCode.SEND_BATCH_MESSAGE, ext, body, timeout_s=self.opts.request_timeout_s
            )
        )
        self.inflight.append((k, request, count, addr, fut, deadline))

    def _finish_one(self) -> None:
        k, request, count, addr, fut, deadline = self.inflight.popleft()
        problem = ""
        if fut is None:
            problem = f"no master known for broker group {k[1]}"
        else:
            try:
                resp = self.client.wait(addr, fut)
            except TransportError as exc:
                problem = str(exc)
            else:
                if resp.code in SEND_OK_CODES:
                    self.sent += count
                    self.per_topic[k[0]] = self.per_topic.get(k[0], 0) + count
                    if resp.code != ResponseCode.SUCCESS:
                        self.not_replicated += count
                    return
                if resp.code not in _RETRY_CODES:
                    raise BrokerRefusal(
                        f"SEND_BATCH_MESSAGE of {count} messages to {k[0]}", addr, resp.code, resp.remark
                    )
                problem = f"{addr}: code {resp.code} {resp.remark}"
        if time.monotonic() > deadline:
            raise Unavailable(f"sending {count} messages to {k[0]}@{k[1]}:{k[2]}", problem, self.opts.send_timeout_s)
        log.info("send to %s@%s:%d failed (%s); retrying (same UNIQ_KEYs, deduplicated)", *k, problem)
        time.sleep(0.2)
        self.client.route(k[0], max_age_s=1.0)
        self._start(k, request, count, deadline)  # same queue: the dedup window is per broker

    def flush(self) -> None:
        deadline = time.monotonic() + self.opts.send_timeout_s
        for k, batch in list(self.open.items()):
            self._start(k, self._request(k, batch), len(batch.entries), deadline)
        self.open.clear()
        while self.inflight:
            self._finish_one()


def write_batches(opts: SinkOptions, sink_id: str, batch_id: str, iterator) -> SinkCommit:
    """Send every row of one task; returns what was sent."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    prefix = f"{sink_id}\x00{batch_id}\x00{partition_id}\x00".encode()
    sender = _Sender(opts)
    seen: dict[str, int] = {}
    for batch in iterator:
        cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        bodies = cols["body"]
        n_rows = batch.num_rows
        topics = cols.get("topic") or [None] * n_rows
        keys_col = cols.get("keys") or [None] * n_rows
        tags_col = cols.get("tags") or [None] * n_rows
        props_col = cols.get("properties") or [None] * n_rows
        queues_of: dict[str, list] = {}  # per Arrow batch: routes are re-read between batches
        for i in range(n_rows):
            body = bodies[i]
            if body is None:
                raise OptionError(
                    "columns",
                    f"row {i} of task {partition_id} has a null body",
                    "filter out null bodies or coalesce them to empty bytes",
                )
            if isinstance(body, str):
                body = body.encode()
            topic = topics[i] or opts.topic
            if not topic:
                raise OptionError(
                    "topic",
                    f"row {i} has a null topic and there is no topic option",
                    'add .option("topic", ...) as the default',
                )
            keys = keys_col[i]
            if isinstance(keys, list):
                keys = " ".join(k for k in keys if k)
            keys = keys or ""
            tags = tags_col[i] or ""
            props = props_col[i]
            content = row_key(prefix, topic, body, keys, tags, props, 0)
            n = seen.get(content, 0)
            seen[content] = n + 1
            uniq = content if n == 0 else row_key(prefix, topic, body, keys, tags, props, n)

            queues = queues_of.get(topic)
            if queues is None:
                queues = queues_of[topic] = sender.queues(topic)
            mq = queues[zlib.crc32((keys or uniq).encode()) % len(queues)]
            sender.add(topic, mq, body, keys, tags, props, uniq)
    sender.flush()
    return SinkCommit(partition_id, batch_id, sink_id, sender.sent, sender.not_replicated, sender.per_topic)


class PyrmqBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts
        self.job_id = opts.sink_id or f"job-{uuid.uuid4().hex}"  # one per write job, shared by its tasks

    def write(self, iterator) -> SinkCommit:
        return write_batches(self.opts, self.job_id, "batch", iterator)

    def commit(self, messages) -> None:
        total = sum(m.messages for m in messages if m is not None)
        log.info("pyrmq sink job %s: %d messages sent", self.job_id, total)

    def abort(self, messages) -> None:
        sent = sum(m.messages for m in messages if m is not None)
        log.warning(
            "pyrmq sink job %s failed; %d messages of finished tasks are already visible (a retry with "
            "the same sinkId deduplicates them)",
            self.job_id,
            sent,
        )


class PyrmqStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts

    def write(self, iterator) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        sink_id = self.opts.sink_id or query_id or "pyrmq-sink"
        return write_batches(self.opts, sink_id, batch_id or "0", iterator)

    def commit(self, messages, batchId: int) -> None:
        total = sum(m.messages for m in messages if m is not None)
        log.info("pyrmq sink: batch %d committed, %d messages", batchId, total)

    def abort(self, messages, batchId: int) -> None:
        sent = sum(m.messages for m in messages if m is not None)
        log.warning(
            "pyrmq sink: batch %d aborted; %d messages already sent stay visible; the replay of the batch"
            " resends them with the same UNIQ_KEYs and the broker stores none twice",
            batchId,
            sent,
        )
