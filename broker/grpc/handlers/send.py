"""SendMessage: a batch of messages for one queue -> one store append -> one response.

Order of checks (RocketMQ AbstractSendMessageProcessor.msgCheck, plus the B-MSG cases of reliability.md §7):
role (a slave never takes writes), broker permission, topic name and forbidden topics, topic existence (auto-create
when allowed), topic permission, queue id, then bodies and properties. The store re-checks sizes and applies the
DELAY rewrite; its status is mapped in ``status_map``. Per-message work is one draft and, on success, one id
(``convert.checked_drafts`` screens the batch in the same pass; the exact ``validate.messages`` runs only on a
batch the screen flags). Constants (delay levels, the offsetMsgId host prefix) come precomputed from the context.

With ``dedup`` set, messages whose UNIQ_KEY this broker stored for the topic within ``sendDedupWindowSeconds``
are not stored again; the response repeats their first result (``broker.dedup``). A key that another request
is storing right now answers SYSTEM_BUSY so the client retries instead of racing itself into a duplicate.
"""

from __future__ import annotations

from broker.dedup import FirstSend, SendDedupWindow
from broker.grpc import convert, validate
from broker.context import BrokerContext
from broker.grpc.status_map import put_code
from broker.metadata.topics import TopicConfig, perm_text, perm_writeable
from broker.store.types import MessageDraft, PutStatus
from remoting.codes import ResponseCode
from remoting.message_codec import PROPERTY_UNIQ_KEY
from remoting.pb import broker_pb2

Response = broker_pb2.SendMessageResponse


def _reply(code: ResponseCode | int, remark: str, **fields) -> Response:
    return Response(code=int(code), remark=remark, **fields)


async def handle(ctx: BrokerContext, req: broker_pb2.SendMessageRequest) -> Response:
    admitted = _admit(ctx, req)
    if isinstance(admitted, Response):
        _count(ctx, req, ResponseCode(admitted.code).name)
        return admitted
    checked = convert.checked_drafts(
        req.messages, req.born_host, req.reconsume_times, ctx.max_message_size, ctx.max_delay_level
    )
    if checked is None:  # the screen flagged something: the exact check says what, or lets it through
        bad = validate.messages(req.messages, ctx.max_message_size, ctx.max_delay_level)
        if bad:
            resp = _reply(bad.code, bad.remark)
            _count(ctx, req, ResponseCode(resp.code).name)
            return resp
        checked = convert.Checked(
            convert.drafts(req.messages, req.born_host, req.reconsume_times), [len(m.body) for m in req.messages]
        )
    if req.dedup and ctx.dedup is not None:
        resp, status = await _store_dedup(ctx, req, ctx.dedup, checked.drafts)
    else:
        resp, status = await _store(ctx, req, checked.drafts)
    _count(ctx, req, status, checked.sizes)
    return resp


def _admit(ctx: BrokerContext, req: broker_pb2.SendMessageRequest) -> TopicConfig | Response:
    """The topic config to write to, or the refusal (the messages themselves are checked by the caller)."""
    broker = ctx.settings.broker
    if ctx.is_slave:
        return _reply(ResponseCode.SERVICE_NOT_AVAILABLE, ctx.slave_refusal("send to the master"))
    if not perm_writeable(broker.broker_permission):
        return _reply(
            ResponseCode.NO_PERMISSION,
            f"broker {ctx.broker_name} is not writable (brokerPermission={broker.broker_permission});"
            " send to another broker",
        )
    bad = validate.send_topic(req.topic)
    if bad:
        return _reply(bad.code, bad.remark)
    cfg = ctx.topics.get(req.topic)
    if cfg is None:
        if not broker.auto_create_topic_enable:
            return _reply(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {req.topic} does not exist on broker {ctx.broker_name} and autoCreateTopicEnable=false;"
                f" create it first (mqctl updateTopic -t {req.topic})",
            )
        nums = req.default_topic_queue_nums or broker.default_topic_queue_nums
        bad = validate.queue_nums(nums, nums)
        if bad:
            return _reply(bad.code, f"default_topic_queue_nums: {bad.remark}")
        cfg, created = ctx.topics.create_if_absent(req.topic, nums)
        if created:
            ctx.topics_changed()
    if not perm_writeable(cfg.perm):
        return _reply(
            ResponseCode.NO_PERMISSION, f"topic {req.topic} is not writable (perm {perm_text(cfg.perm)}); ask an admin"
        )
    bad = validate.queue_id(req.queue_id, cfg.write_queue_nums, req.topic, "write")
    if bad:
        return _reply(bad.code, bad.remark)
    return cfg


async def _store(
    ctx: BrokerContext, req: broker_pb2.SendMessageRequest, drafts: list[MessageDraft]
) -> tuple[Response, PutStatus]:
    result = await ctx.store.put_messages(req.topic, req.queue_id, drafts)
    code, remark = put_code(result.status, result.remark)
    if not result.status.stored:
        return _reply(code, remark, queue_id=req.queue_id, broker_name=ctx.broker_name), result.status
    ctx.stats.put.add(len(drafts))
    return _reply(
        code,
        remark,
        queue_id=req.queue_id,
        queue_offset=result.queue_offset,
        msg_ids=ctx.offset_msg_ids(result.physical_offsets),
        physical_offset=result.wrote_offset,
        broker_name=ctx.broker_name,
    ), result.status


async def _store_dedup(
    ctx: BrokerContext, req: broker_pb2.SendMessageRequest, window: SendDedupWindow, drafts: list[MessageDraft]
) -> tuple[Response, PutStatus | str]:
    plan = window.plan(req.topic, [d.properties.get(PROPERTY_UNIQ_KEY, "") for d in drafts])
    if plan.in_flight:
        return _reply(
            ResponseCode.SYSTEM_BUSY,
            f"{len(plan.in_flight)} of these UNIQ_KEYs are being stored by another request right now;"
            " retry shortly (they will not be stored twice)",
            queue_id=req.queue_id,
            broker_name=ctx.broker_name,
        ), "DEDUP_IN_FLIGHT"
    stored: list[FirstSend] = []
    code, remark, status = ResponseCode.SUCCESS, "", "DEDUP_DUPLICATE"
    if plan.new_indices:
        new_drafts = [drafts[i] for i in plan.new_indices]
        try:
            result = await ctx.store.put_messages(req.topic, req.queue_id, new_drafts)
        except BaseException:
            window.release(plan)
            raise
        status = result.status
        code, remark = put_code(result.status, result.remark)
        if not result.status.stored:
            window.release(plan)
            return _reply(code, remark, queue_id=req.queue_id, broker_name=ctx.broker_name), status
        ctx.stats.put.add(len(new_drafts))
        stored_at = result.store_timestamp
        ids = ctx.offset_msg_ids(result.physical_offsets)
        stored = [
            FirstSend(int(code), req.queue_id, result.queue_offset + i, phy, ids[i], stored_at)
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
    return _reply(
        code,
        remark,
        queue_id=first.queue_id,
        queue_offset=first.queue_offset,
        msg_ids=[r.msg_id for r in results],
        physical_offset=first.physical_offset,
        broker_name=ctx.broker_name,
    ), status


def _count(
    ctx: BrokerContext, req: broker_pb2.SendMessageRequest, status: PutStatus | str, sizes: list[int] | None = None
) -> None:
    """One metrics call per request (not per message); ``sizes`` from the conversion pass when there was one."""
    if ctx.metrics is None:
        return
    if sizes is None:
        sizes = [len(m.body) for m in req.messages]
    ctx.metrics.on_send(req.topic, len(sizes), sum(sizes), status, sizes=sizes)
