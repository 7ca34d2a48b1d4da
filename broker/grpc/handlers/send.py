"""SendMessage: a batch of messages for one queue -> one store append -> one response.

Order of checks (RocketMQ AbstractSendMessageProcessor.msgCheck, plus the B-MSG cases of reliability.md §7):
role (a slave never takes writes), broker permission, topic name and forbidden topics, topic existence (auto-create
when allowed), topic permission, queue id, then bodies and properties. The store re-checks sizes and applies the
DELAY rewrite; its status is mapped in ``status_map``. Per-message work is one draft and, on success, one id.

With ``dedup`` set, messages whose UNIQ_KEY this broker stored for the topic within ``sendDedupWindowSeconds``
are not stored again; the response repeats their first result (``broker.dedup``). A key that another request
is storing right now answers SYSTEM_BUSY so the client retries instead of racing itself into a duplicate.
"""

from __future__ import annotations

from broker.dedup import FirstSend, SendDedupWindow
from broker.grpc import convert, validate
from broker.grpc.context import BrokerContext
from broker.grpc.status_map import put_code
from broker.metadata.topics import TopicConfig, perm_text, perm_writeable
from broker.store.types import PROPERTY_UNIQ_KEY, PutStatus, offset_msg_id
from remoting.codes import ResponseCode
from remoting.pb import broker_pb2

Response = broker_pb2.SendMessageResponse


def _reply(code: ResponseCode | int, remark: str, **fields) -> Response:
    return Response(code=int(code), remark=remark, **fields)


async def handle(ctx: BrokerContext, req: broker_pb2.SendMessageRequest) -> Response:
    admitted = _admit(ctx, req)
    if isinstance(admitted, Response):
        _count(ctx, req, ResponseCode(admitted.code).name)
        return admitted
    if req.dedup and ctx.dedup is not None:
        resp, status = await _store_dedup(ctx, req, ctx.dedup)
    else:
        resp, status = await _store(ctx, req)
    _count(ctx, req, status)
    return resp


def _admit(ctx: BrokerContext, req: broker_pb2.SendMessageRequest) -> TopicConfig | Response:
    """The topic config to write to, or the refusal."""
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
    bad = validate.queue_id(req.queue_id, cfg.write_queue_nums, req.topic, "write") or validate.messages(
        req.messages, ctx.settings.store.max_message_size, len(ctx.settings.store.delay_levels_ms)
    )
    if bad:
        return _reply(bad.code, bad.remark)
    return cfg


async def _store(ctx: BrokerContext, req: broker_pb2.SendMessageRequest) -> tuple[Response, PutStatus]:
    drafts = convert.drafts(req.messages, req.born_host, req.reconsume_times)
    result = await ctx.store.put_messages(req.topic, req.queue_id, drafts)
    code, remark = put_code(result.status, result.remark)
    if not result.status.stored:
        return _reply(code, remark, queue_id=req.queue_id, broker_name=ctx.broker_name), result.status
    ctx.stats.put.add(len(drafts))
    host = ctx.store_host
    return _reply(
        code,
        remark,
        queue_id=req.queue_id,
        queue_offset=result.queue_offset,
        msg_ids=[offset_msg_id(host, p) for p in result.physical_offsets],
        physical_offset=result.wrote_offset,
        broker_name=ctx.broker_name,
    ), result.status


async def _store_dedup(
    ctx: BrokerContext, req: broker_pb2.SendMessageRequest, window: SendDedupWindow
) -> tuple[Response, PutStatus | str]:
    plan = window.plan(req.topic, [m.properties.get(PROPERTY_UNIQ_KEY, "") for m in req.messages])
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
        new_messages = [req.messages[i] for i in plan.new_indices]
        try:
            result = await ctx.store.put_messages(
                req.topic, req.queue_id, convert.drafts(new_messages, req.born_host, req.reconsume_times)
            )
        except BaseException:
            window.release(plan)
            raise
        status = result.status
        code, remark = put_code(result.status, result.remark)
        if not result.status.stored:
            window.release(plan)
            return _reply(code, remark, queue_id=req.queue_id, broker_name=ctx.broker_name), status
        ctx.stats.put.add(len(new_messages))
        host, stored_at = ctx.store_host, result.store_timestamp
        stored = [
            FirstSend(int(code), req.queue_id, result.queue_offset + i, phy, offset_msg_id(host, phy), stored_at)
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


def _count(ctx: BrokerContext, req: broker_pb2.SendMessageRequest, status: PutStatus | str) -> None:
    """One metrics call per request (not per message)."""
    if ctx.metrics is None:
        return
    sizes = [len(m.body) for m in req.messages]
    ctx.metrics.on_send(req.topic, len(sizes), sum(sizes), status, sizes=sizes)
