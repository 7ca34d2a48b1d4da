"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): one processor, as in RocketMQ
(SendMessageProcessor; spec remoting.md §2.2, §3). Code 10 carries full header names (the Go and C++ clients
send only it), 310/320 the one-letter V2 keys; ``SendHeader.parse`` reads both. ``batch``/``m`` (or code 320)
selects the batch body of §3.5.

Checks (``validate``, shared with the v2 SendMessage): the header's numbers without a sign, a bornTimestamp in
1970..9999 and a sysFlag of MessageSysFlag's bits without the address-layout ones (29 / 13); ``send_admit`` (role,
permission, transactions, topic, queue); then the messages: bodies non-empty and at most ``maxMessageSize``, every
system property RocketMQ or pyrmq parses (DELAY, TIMER_*, REAL_QID, MAX_OFFSET, UNIQ_KEY's length, ...) strict
ASCII decimal in range, a body flagged COMPRESSED that inflates (13 MESSAGE_ILLEGAL with a remark naming the
property or the message). A DELAY above the highest level is clamped to it, as RocketMQ does. Stored properties are
the client's (plus, for a batch, the batch's own after each message's), with ``CLUSTER`` added and ``WAIT``
dropped; ``WAIT=false`` still means "answer without waiting for the flush and the slave".

A plain single message (no batch, not compressed, no transaction half, no dedup) is stored with the other single
sends of the same event-loop pass (``MessageStore.put_grouped``: one append per queue, one flush/replica wait for
all), and answered from a callback, with no task or coroutine per request: RocketMQ's clients send one message per
request, and on a SYNC_MASTER each paid a whole put and wait of its own (issue 26).

A batch without DELAY goes to the store as decoded (``MessageStore.put_batch``): no draft, dict or property text
per message. A batch with a DELAY inside takes the draft path so each message is scheduled on its own.

With the ``dedup`` ext field (pyrmq's, spec §3 conventions), messages whose UNIQ_KEY this broker stored for the
topic within ``sendDedupWindowSeconds`` are not stored again; the answer repeats their first result. A key that
another request is storing right now answers SYSTEM_BUSY so the client retries instead of racing itself.

With the ``timeoutMillis`` ext field (pyrmq's: what the sender still waits), the flush and slave waits end
``answer_deadline`` after the request arrived, a margin before the sender gives up, so a sender with a short
timeout gets FLUSH_SLAVE_TIMEOUT / FLUSH_DISK_TIMEOUT (stored on the master) instead of timing out not knowing.

Every answer carries the response header of spec §3.6 (Java reads it without a null check): ``msgId`` (the
offset msgId, comma-separated for a batch), ``queueId``, ``queueOffset`` (the first message's), ``MSG_REGION``
and ``TRACE_ON``; a refusal has ``msgId`` empty and ``queueOffset`` -1. Codes: 0, and 10 / 11 / 12 (stored, with
a weaker promise: the remark says which), else the refusal's code.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable
from operator import itemgetter

from broker.context import BrokerContext
from broker.dedup import FirstSend, SendDedupWindow
from broker.processors import validate
from broker.processors.send_admit import Refusal, Target, admit, half_send
from broker.processors.status_map import put_code
from broker.store.types import MessageDraft, PutResult, PutStatus, RawBatch
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection, DeferredAnswer, await_answer
from remoting.frame_codec import FLAG_RESPONSE, RemotingCommand, response_to
from remoting.headers import parse_host_port
from remoting.message_codec import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    BatchError,
    decode_batch,
    decode_properties,
    encode_properties,
    property_value,
    string_to_properties,
)
from remoting.message_headers import SendHeader

log = logging.getLogger(__name__)

MSG_REGION = "DefaultRegion"  # RocketMQ's default regionId
TRACE_ON = "true"
PROPERTY_CLUSTER = "CLUSTER"
MAX_BATCH_MESSAGES = 65536
_DELAY_KEY = PROPERTY_DELAY_TIME_LEVEL.encode() + b"\x01"
_TRAN_KEY = b"tran_msg\x01true"
MIN_ANSWER_MARGIN_MS = 100  # at least this much of the sender's time is left for the answer's way back
INLINE_INFLATE = 1 << 20  # bytes of a compressed body inflated on the event loop before the check moves to a thread


def answer_deadline(timeout_millis: int | None) -> float | None:
    """Event-loop time by which a send must be answered: the sender's remaining ``timeoutMillis`` less a margin
    for the answer to travel back (a tenth of it, at least MIN_ANSWER_MARGIN_MS, at most half); None without."""
    if timeout_millis is None:
        return None
    total = max(0, timeout_millis)
    margin = min(total // 2, max(MIN_ANSWER_MARGIN_MS, total // 10))
    return asyncio.get_running_loop().time() + (total - margin) / 1000.0


def _reply(
    request: RemotingCommand, code: int, remark: str | None, queue_id: int, queue_offset: int, msg_ids: list[str]
) -> RemotingCommand:
    return response_to(
        request,
        code,
        remark or None,
        ext={
            "msgId": ",".join(msg_ids),
            "queueId": str(queue_id),
            "queueOffset": str(queue_offset),
            "MSG_REGION": MSG_REGION,
            "TRACE_ON": TRACE_ON,
        },
    )


def _refuse(request: RemotingCommand, code: int, remark: str, queue_id: int) -> RemotingCommand:
    return _reply(request, code, remark, queue_id, -1, [])


def _born_host(conn: Connection) -> tuple[str, int]:
    """The producer's address as the broker sees it (RocketMQ's bornHost is the channel's remote address)."""
    host = conn.attrs.get("bornHost")
    if host is None:
        try:
            host = parse_host_port(conn.peer)
        except ValueError:  # "?" when the socket had no peer name
            host = ("127.0.0.1", 0)
        conn.attrs["bornHost"] = host
    return host


def _batch_properties(ctx: BrokerContext, text: str) -> tuple[dict[str, str], bool]:
    """The properties to store from a header's ``properties`` text: WAIT dropped (returned as the wait flag),
    CLUSTER added."""
    props = string_to_properties(text) if text else {}
    wait = props.pop(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false"
    props[PROPERTY_CLUSTER] = ctx.settings.broker.broker_cluster_name
    return props, wait


class _Batch:
    """The messages of one request, in the form the store takes: drafts, or a raw batch."""

    __slots__ = ("drafts", "keys", "raw", "sizes", "wait")

    def __init__(self, sizes: list[int], wait: bool, keys, drafts=None, raw: RawBatch | None = None) -> None:
        self.sizes = sizes
        self.wait = wait
        self.keys = keys  # () -> UNIQ_KEY per message, for dedup only
        self.drafts = drafts
        self.raw = raw

    def subset(self, indices: list[int]) -> _Batch:
        sizes = [self.sizes[i] for i in indices]
        if self.raw is not None:
            raw = self.raw
            entries = [raw.entries[i] for i in indices]
            sub = RawBatch(entries, raw.suffix, raw.sys_flag, raw.born_timestamp, raw.born_host, raw.reconsume_times,
                           raw.wait)
            return _Batch(sizes, self.wait, self.keys, raw=sub)
        return _Batch(sizes, self.wait, self.keys, drafts=[self.drafts[i] for i in indices])

    async def put(self, ctx: BrokerContext, target: Target, deadline: float | None) -> PutResult:
        if self.raw is not None:
            return await ctx.store.put_batch(target.topic, target.queue_id, self.raw, deadline=deadline)
        return await ctx.store.put_messages(
            target.topic, target.queue_id, self.drafts, wait=self.wait, deadline=deadline
        )


def _single_draft(
    ctx: BrokerContext, conn: Connection, h: SendHeader, body: bytes, target: Target
) -> tuple[MessageDraft, bool] | str:
    """The one message of a single send and its WAIT, or why it is refused."""
    size = len(body)
    if size == 0:
        return "message 0 has an empty body; send a non-empty body"
    if size > ctx.max_message_size:
        return f"message 0 body is {size} bytes, over maxMessageSize {ctx.max_message_size}; split or compress it"
    if h.properties:
        bad = validate.properties_text(h.properties)
        if bad:
            return bad.remark
    props, wait = _batch_properties(ctx, h.properties)
    if target.to_dlq:
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    return MessageDraft(body, props, h.flag, h.born_timestamp, _born_host(conn), h.reconsume_times, h.sys_flag), wait


def _single(ctx: BrokerContext, conn: Connection, h: SendHeader, body: bytes, target: Target) -> _Batch | str:
    single = _single_draft(ctx, conn, h, body, target)
    if isinstance(single, str):
        return single
    draft, wait = single
    return _Batch([len(body)], wait, lambda: [draft.properties.get(PROPERTY_UNIQ_KEY, "")], drafts=[draft])


def _batch(ctx: BrokerContext, conn: Connection, h: SendHeader, body: bytes) -> _Batch | str:
    try:
        entries = decode_batch(body, MAX_BATCH_MESSAGES, ctx.max_message_size)
    except BatchError as exc:
        return f"the SEND_BATCH_MESSAGE body is not valid: {exc} (maxMessageSize={ctx.max_message_size})"
    if h.properties:
        bad = validate.properties_text(h.properties)
        if bad:
            return f"the batch's properties: {bad.remark}"
    batch_props, wait = _batch_properties(ctx, h.properties)
    if PROPERTY_DELAY_TIME_LEVEL in batch_props:
        return "a batch cannot carry a batch-wide DELAY; send delayed messages one by one"
    own_props = list(map(itemgetter(2), entries))
    joined = b"\x02".join(own_props)  # the properties only, not the bodies
    bad = validate.properties_bytes(joined, own_props)
    if bad:
        return bad.remark
    if b"TRAN_MSG\x01" in joined and _TRAN_KEY in joined.lower():
        return "batch request does not support transaction messages; send each half message on its own"
    sizes = list(map(len, map(itemgetter(1), entries)))

    def keys() -> list[str]:
        return [property_value(e[2], PROPERTY_UNIQ_KEY) or "" for e in entries]

    born_host = _born_host(conn)
    if _DELAY_KEY not in joined:
        suffix = encode_properties(batch_props)
        raw = RawBatch(entries, suffix, h.sys_flag, h.born_timestamp, born_host, h.reconsume_times, wait)
        return _Batch(sizes, wait, keys, raw=raw)
    drafts = []
    for i, (flag, msg_body, own) in enumerate(entries):
        props = decode_properties(own)
        props.update(batch_props)
        drafts.append(MessageDraft(msg_body, props, flag, h.born_timestamp, born_host, h.reconsume_times, h.sys_flag))
    return _Batch(sizes, wait, keys, drafts=drafts)


async def _inflates(ctx: BrokerContext, batch: _Batch, flag: int, indexed: bool) -> str | None:
    """Why the bodies of a request flagged COMPRESSED are not what the flag says, or None: together they may
    inflate to MAX_INFLATED_FACTOR x maxMessageSize. The first INLINE_INFLATE bytes of each are inflated on the
    event loop (a real compressed body fits), the rest of a check in a thread: a small zlib bomb must not hold the
    loop."""
    bodies = [e[1] for e in batch.raw.entries] if batch.raw is not None else [d.body for d in batch.drafts]
    budget = validate.MAX_INFLATED_FACTOR * ctx.max_message_size
    for i, body in enumerate(bodies):
        index = i if indexed else None
        got = validate.compressed_body(body, flag, budget, index, max_inline=INLINE_INFLATE)
        if got is validate.MORE:
            got = await asyncio.to_thread(validate.compressed_body, body, flag, budget, index)
        if isinstance(got, validate.Rejection):
            return got.remark
        budget -= got
    return None


def dispatch_send(
    ctx: BrokerContext, conn: Connection, request: RemotingCommand
) -> RemotingCommand | DeferredAnswer | Awaitable[RemotingCommand]:
    """The send processor: the answer now (a refusal), a deferred answer (a plain single message, stored with the
    other single sends of this event-loop pass: ``MessageStore.put_grouped``), or a coroutine (everything else)."""
    checked = _checked(ctx, request)
    if isinstance(checked, RemotingCommand):
        return checked
    h, deadline, admitted = checked
    if (
        not h.batch
        and not h.sys_flag & validate.COMPRESSED_FLAG
        and not (h.dedup and ctx.dedup is not None)
        and not (ctx.transactions is not None and half_send(h))
        and not ctx.topics.unsaved(admitted.topic)
    ):
        return _send_grouped(ctx, conn, request, h, admitted, deadline)
    return _serve_checked(ctx, conn, request, h, admitted, deadline)


async def serve_send(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    answer = dispatch_send(ctx, conn, request)
    if isinstance(answer, DeferredAnswer):
        return await await_answer(answer)
    return await answer if inspect.isawaitable(answer) else answer


def _checked(ctx: BrokerContext, request: RemotingCommand) -> RemotingCommand | tuple[SendHeader, float | None, Target]:
    h, plain = SendHeader.parse_plain(request.code, request.ext)
    deadline = answer_deadline(h.timeout_millis) if h.timeout_millis is not None else None
    ext = None if plain else request.ext  # a plain header's numbers are digits only: no sign to look for
    bad = validate.send_header(ext, request.code != RequestCode.SEND_MESSAGE and bool(ext) and "b" in ext,
                               h.sys_flag, h.born_timestamp)
    if bad:
        _count(ctx, h.topic, 0 if h.batch else 1, bad.code, None)
        return _refuse(request, bad.code, bad.remark, h.queue_id)
    admitted = admit(ctx, h)
    if isinstance(admitted, Refusal):
        _count(ctx, h.topic, 0 if h.batch else 1, admitted.code, None)
        return _refuse(request, admitted.code, admitted.remark, h.queue_id)
    return h, deadline, admitted


def _send_grouped(
    ctx: BrokerContext, conn: Connection, request: RemotingCommand, h: SendHeader, target: Target,
    deadline: float | None,
) -> RemotingCommand | DeferredAnswer:
    single = _single_draft(ctx, conn, h, request.body_bytes(), target)
    if isinstance(single, str):
        _count(ctx, target.topic, 1, ResponseCode.MESSAGE_ILLEGAL, None)
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, single, target.queue_id)
    draft, wait = single
    sizes = [len(draft.body)]
    answer = DeferredAnswer()
    queue_text = str(target.queue_id)

    def done(result: PutResult) -> None:
        if answer.cancelled:  # the connection closed meanwhile: the message is stored, its answer has nowhere to go
            return
        try:
            if result.status is PutStatus.PUT_OK and not result.remark:  # nearly every answer: no lookups, no lists
                ctx.stats.put.add(1)
                reply = RemotingCommand(
                    ResponseCode.SUCCESS, opaque=request.opaque, flag=FLAG_RESPONSE,
                    serialize_type=request.serialize_type,
                    ext={"msgId": f"{ctx.offset_msg_id_prefix}{result.physical_offsets[0]:016X}",
                         "queueId": queue_text, "queueOffset": str(result.queue_offset), "MSG_REGION": MSG_REGION,
                         "TRACE_ON": TRACE_ON},
                )
                if ctx.metrics is not None:
                    ctx.metrics.on_single_stored(target.topic, sizes[0])
            else:
                reply, status = _stored_reply(ctx, request, target, result, 1)
                _count(ctx, target.topic, 1, status, sizes)
        except Exception as exc:  # noqa: BLE001 - the sender gets an answer, the log the traceback
            log.exception("answering a grouped send failed")
            reply = response_to(request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        answer.resolve(reply)

    put = ctx.store.put_grouped(target.topic, target.queue_id, draft, wait=wait, deadline=deadline, on_done=done)
    if put is not None:  # refused at once
        reply, status = _stored_reply(ctx, request, target, put, 1)
        _count(ctx, target.topic, 1, status, sizes)
        return reply
    return answer


async def _serve_checked(
    ctx: BrokerContext, conn: Connection, request: RemotingCommand, h: SendHeader, admitted: Target,
    deadline: float | None,
) -> RemotingCommand:
    if ctx.topics.unsaved(admitted.topic):
        await ctx.topics.saved()  # a topic this send created is on disk before the message is acknowledged
    body = request.body_bytes()
    batch = _batch(ctx, conn, h, body) if h.batch else _single(ctx, conn, h, body, admitted)
    if not isinstance(batch, str) and h.sys_flag & validate.COMPRESSED_FLAG:
        batch = await _inflates(ctx, batch, h.sys_flag, h.batch) or batch
    if isinstance(batch, str):
        _count(ctx, admitted.topic, 0 if h.batch else 1, ResponseCode.MESSAGE_ILLEGAL, None)
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, batch, admitted.queue_id)
    if not h.batch and ctx.transactions is not None and half_send(h):
        reply, status = await _store_half(ctx, request, admitted, batch, h.producer_group, deadline)
    elif h.dedup and ctx.dedup is not None:
        reply, status = await _store_dedup(ctx, request, admitted, batch, ctx.dedup, deadline)
    else:
        reply, status = await _store(ctx, request, admitted, batch, deadline)
    _count(ctx, admitted.topic, len(batch.sizes), status, batch.sizes)
    return reply


def _stored_reply(
    ctx: BrokerContext, request: RemotingCommand, target: Target, result: PutResult, count: int
) -> tuple[RemotingCommand, PutStatus]:
    code, remark = put_code(result.status, result.remark)
    if not result.status.stored:
        return _refuse(request, code, remark, target.queue_id), result.status
    ctx.stats.put.add(count)
    msg_ids = ctx.offset_msg_ids(result.physical_offsets)
    return _reply(request, code, remark, target.queue_id, result.queue_offset, msg_ids), result.status


async def _store(
    ctx: BrokerContext, request: RemotingCommand, target: Target, batch: _Batch, deadline: float | None
) -> tuple[RemotingCommand, PutStatus]:
    return _stored_reply(ctx, request, target, await batch.put(ctx, target, deadline), len(batch.sizes))


async def _store_half(
    ctx: BrokerContext, request: RemotingCommand, target: Target, batch: _Batch, group: str, deadline: float | None
) -> tuple[RemotingCommand, PutStatus]:
    """A half message: stored in the half queue by the transaction service; the answer names the real queue with
    the half's queue offset and offset msgId (what END_TRANSACTION sends back), as RocketMQ answers."""
    result = await ctx.transactions.put_half(batch.drafts[0], target.topic, target.queue_id, group, batch.wait,
                                             deadline)
    code, remark = put_code(result.status, result.remark)
    if not result.status.stored:
        return _refuse(request, code, remark, target.queue_id), result.status
    ctx.stats.put.add(1)
    msg_ids = ctx.offset_msg_ids(result.physical_offsets)
    return _reply(request, code, remark, target.queue_id, result.queue_offset, msg_ids), result.status


async def _store_dedup(
    ctx: BrokerContext,
    request: RemotingCommand,
    target: Target,
    batch: _Batch,
    window: SendDedupWindow,
    deadline: float | None,
) -> tuple[RemotingCommand, PutStatus | str]:
    plan = window.plan(target.topic, batch.keys())
    if plan.in_flight:
        return _refuse(
            request,
            ResponseCode.SYSTEM_BUSY,
            f"{len(plan.in_flight)} of these UNIQ_KEYs are being stored by another request right now;"
            " retry shortly (they will not be stored twice)",
            target.queue_id,
        ), "DEDUP_IN_FLIGHT"
    stored: list[FirstSend] = []
    code, remark, status = ResponseCode.SUCCESS, "", "DEDUP_DUPLICATE"
    if plan.new_indices:
        part = batch.subset(plan.new_indices) if len(plan.new_indices) < len(batch.sizes) else batch
        try:
            result = await part.put(ctx, target, deadline)
        except BaseException:
            window.release(plan)
            raise
        status = result.status
        code, remark = put_code(result.status, result.remark)
        if not result.status.stored:
            window.release(plan)
            return _refuse(request, code, remark, target.queue_id), status
        ctx.stats.put.add(len(part.sizes))
        ids = ctx.offset_msg_ids(result.physical_offsets)
        stored = [
            FirstSend(int(code), target.queue_id, result.queue_offset + i, phy, ids[i], result.store_timestamp)
            for i, phy in enumerate(result.physical_offsets)
        ]
        window.complete(plan, stored)
    results = plan.results(stored)
    first = results[0]
    duplicates = len(results) - len(stored)
    if duplicates:
        note = f"{duplicates} of {len(results)} messages were stored before (dedup); their first results are repeated"
        remark = f"{remark}; {note}" if remark else note
    if not stored:
        code = ResponseCode(first.code)
    reply = _reply(request, code, remark, first.queue_id, first.queue_offset, [r.msg_id for r in results])
    return reply, status


def _count(ctx: BrokerContext, topic: str, count: int, status: PutStatus | str | int, sizes: list[int] | None) -> None:
    """One metrics call per request (not per message)."""
    if ctx.metrics is None:
        return
    if isinstance(status, int):
        try:
            status = ResponseCode(status).name
        except ValueError:
            status = str(status)
    if sizes is None:  # refused before its messages were read: at most the one message of a single send
        ctx.metrics.on_send(topic, count, 0, status)
    else:
        ctx.metrics.on_send(topic, count, sum(sizes), status, sizes=sizes)


def register(server, ctx: BrokerContext) -> None:
    def processor(conn: Connection, request: RemotingCommand):
        return dispatch_send(ctx, conn, request)

    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        server.register(code, processor)
