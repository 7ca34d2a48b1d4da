"""PullMessage (RocketMQ PullMessageProcessor, spec §5.2 and §6.3).

First processing: validate group (auto-create), topic and queue; commit the carried offset (COMMIT_OFFSET flag,
masters only); read from the store. When nothing is there and the SUSPEND flag is set, the request is held by
``PullRequestHoldService`` until the dispatcher reports a new message for the queue or the hold runs out (long
polling), or for ``shortPollingTimeMills`` when long polling is off. Then the read runs once more, without commit
and without a second hold (RocketMQ's ``brokerAllowSuspend=false`` pass), and whatever it finds is the answer.
"""

from __future__ import annotations

from broker import read_advice
from broker.grpc import validate
from broker.context import BrokerContext
from broker.grpc.status_map import get_code, pull_remark
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.metadata.topics import perm_readable, perm_text, retry_topic
from broker.store.types import GetResult
from remoting.codes import ResponseCode
from remoting.message_codec import TagFilter
from remoting.pb import broker_pb2

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
MAX_MSG_NUMS = 1024  # per pull; the store's transfer caps usually cut earlier


def _reply(code: ResponseCode, remark: str, **fields) -> broker_pb2.PullMessageResponse:
    return broker_pb2.PullMessageResponse(code=int(code), remark=remark, **fields)


def _suggest_broker_id(ctx: BrokerContext, result: GetResult, group_config: SubscriptionGroupConfig) -> int:
    """Which broker id the consumer should pull this queue from next (spec §5.2 steps 1-3, broker/read_advice)."""
    return read_advice.suggest_broker_id(
        role_is_slave=ctx.is_slave,
        slave_read_enable=ctx.settings.broker.slave_read_enable,
        suggest_pulling_from_slave=result.suggest_pulling_from_slave,
        group_broker_id=group_config.broker_id,
        which_broker_when_consume_slowly=group_config.which_broker_when_consume_slowly,
    )


async def handle(ctx: BrokerContext, req: broker_pb2.PullMessageRequest) -> broker_pb2.PullMessageResponse:
    admitted = _admit(ctx, req)
    if isinstance(admitted, broker_pb2.PullMessageResponse):
        return admitted
    group, tag_filter = admitted
    if req.sys_flag & FLAG_COMMIT_OFFSET and not ctx.is_slave and req.commit_offset >= 0:
        ctx.offsets.commit(req.consumer_group, req.topic, req.queue_id, req.commit_offset)

    resp = await _read(ctx, req, group, tag_filter)
    if resp.code == ResponseCode.PULL_NOT_FOUND and req.sys_flag & FLAG_SUSPEND:
        broker = ctx.settings.broker
        hold_ms = min(
            req.suspend_timeout_millis or broker.broker_suspend_max_time_millis, broker.broker_suspend_max_time_millis
        )
        if broker.long_polling_enable:
            await ctx.hold.hold(req.topic, req.queue_id, req.queue_offset, hold_ms / 1000)
        else:
            await ctx.hold.sleep(min(broker.short_polling_time_mills, hold_ms) / 1000)
        resp = await _read(ctx, req, group, tag_filter)
    if ctx.metrics is not None:
        ctx.metrics.on_pull(
            req.topic, req.consumer_group, resp.message_count, len(resp.records), resp.suggest_which_broker_id != 0
        )
    return resp


def _admit(
    ctx: BrokerContext, req: broker_pb2.PullMessageRequest
) -> tuple[SubscriptionGroupConfig, TagFilter] | broker_pb2.PullMessageResponse:
    """The group config and tag filter of a valid pull, or the refusal."""
    bad = validate.group_name(req.consumer_group) or validate.topic_name(req.topic)
    if bad:
        return _reply(bad.code, bad.remark)
    if req.max_msg_nums <= 0:
        return _reply(ResponseCode.INVALID_PARAMETER, f"max_msg_nums={req.max_msg_nums}; ask for 1..{MAX_MSG_NUMS}")
    group = ctx.groups.get(req.consumer_group)
    if group is None:
        group = ctx.groups.find_or_create(req.consumer_group)
        if group is not None:
            ctx.groups_changed()
    if group is None:
        return _reply(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"group {req.consumer_group} does not exist on broker {ctx.broker_name} and autoCreateSubscriptionGroup"
            f"=false; create it (mqctl updateSubGroup -g {req.consumer_group})",
        )
    if not group.consume_enable:
        return _reply(
            ResponseCode.NO_PERMISSION, f"group {req.consumer_group} has consumeEnable=false; enable it first"
        )
    if not perm_readable(ctx.settings.broker.broker_permission):
        return _reply(ResponseCode.NO_PERMISSION, f"broker {ctx.broker_name} is not readable; pull from another broker")
    topic = ctx.topics.get(req.topic)
    if topic is None and req.topic == retry_topic(req.consumer_group) and not ctx.is_slave:
        # The group's own retry topic exists as soon as anyone asks for it (RocketMQ creates it on heartbeat).
        topic, created = ctx.topics.create_retry_topic(req.consumer_group, group.retry_queue_nums)
        if created:
            ctx.topics_changed()
    if topic is None:
        return _reply(
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic {req.topic} does not exist on broker {ctx.broker_name}; refresh the route or create the topic",
        )
    if not perm_readable(topic.perm):
        return _reply(ResponseCode.NO_PERMISSION, f"topic {req.topic} is not readable (perm {perm_text(topic.perm)})")
    bad = validate.queue_id(req.queue_id, topic.read_queue_nums, req.topic, "read")
    if bad:
        return _reply(bad.code, bad.remark)
    tag_filter = TagFilter(req.subscription)
    if not tag_filter.match_all and not tag_filter.tags:
        return _reply(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"subscription {req.subscription!r} names no tag; use '*' or 'tagA || tagB'",
        )
    return group, tag_filter


async def _read(
    ctx: BrokerContext, req: broker_pb2.PullMessageRequest, group: SubscriptionGroupConfig, tag_filter: TagFilter
) -> broker_pb2.PullMessageResponse:
    result = ctx.store.get_message(
        req.consumer_group,
        req.topic,
        req.queue_id,
        req.queue_offset,
        min(req.max_msg_nums, MAX_MSG_NUMS),
        max_total_bytes=max(0, req.max_total_bytes),
        tag_filter=None if tag_filter.match_all else tag_filter,
    )
    code = get_code(result.status, req.queue_offset)
    suggest = _suggest_broker_id(ctx, result, group)
    next_begin = result.next_begin_offset
    remark = pull_remark(code, result.status)
    if code == ResponseCode.PULL_OFFSET_MOVED:
        # spec §5.2 step 6: a slave with offsetCheckInSlave=false never corrects the consumer's offset.
        advice = read_advice.offset_moved_advice(
            role_is_slave=ctx.is_slave,
            offset_check_in_slave=ctx.settings.store.offset_check_in_slave,
            group_broker_id=group.broker_id,
        )
        if advice.override_suggest:
            suggest = advice.suggest_broker_id
        if not advice.correct_offset:
            next_begin = req.queue_offset
        if advice.code != code:
            code = advice.code
            remark = (
                f"{result.status.value}: this slave does not correct offsets (offsetCheckInSlave=false);"
                f" pull from broker {suggest}"
            )
    if result.records:
        ctx.stats.get.add(len(result.records))
    return _reply(
        code,
        remark,
        next_begin_offset=next_begin,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
        suggest_which_broker_id=suggest,
        records=b"".join(result.records) if result.records else b"",
        message_count=len(result.records),
    )
