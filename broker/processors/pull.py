"""PULL_MESSAGE (11) with long polling (RocketMQ PullMessageProcessor + PullRequestHoldService; spec remoting.md
§4, replication spec §5.2).

First execution: validate the group (auto-created when allowed), the topic and the queue; pick the subscription:
the request's own (SUBSCRIPTION flag: Go, pull consumers, our SDK) or, by default, the one the group's HEART_BEAT
registered for the topic (Java and C++ push consumers never send it; none registered -> 24
SUBSCRIPTION_NOT_EXIST, an older registered ``subVersion`` than the request's -> 25); commit the carried offset
(COMMIT_OFFSET flag, masters only); read from the store. A TAG subscription filters by the consume queue's tag
hash codes, then the record's TAGS; a SQL92 one (``enablePropertyFilter=true``, else 1 as RocketMQ answers; 23
with the error's position for an expression that does not compile) by its compiled filter over each record's
properties, read in place (``broker.filter.consumer_filters``). Records that do not match are skipped and
``nextBeginOffset`` still moves past them, master and slave alike. When nothing is there and the SUSPEND flag is set,
the request is held by ``PullRequestHoldService`` until the dispatcher reports a new message for the queue or
``suspendTimeoutMillis`` (capped by ``brokerSuspendMaxTimeMillis``) runs out, or for ``shortPollingTimeMills``
when long polling is off. Then the read runs once more, without commit and without a second hold (RocketMQ's
``brokerAllowSuspend=false`` pass), and whatever it finds is the answer.

The answer: header ``suggestWhichBrokerId`` (``broker.read_advice``), ``nextBeginOffset``, ``minOffset``,
``maxOffset`` always; remark = the store status (then what to do, when the code is not 0); codes 0 / 19 / 20 /
21 as in spec §4.2, including a slave's refusal to correct offsets. The body is the stored records as they are
on disk, written from the store's mapping without a copy (``GetResult.buffers``). A pull that needs no hold is
answered without a task.
"""

from __future__ import annotations

import functools

from broker import read_advice
from broker.context import BrokerContext
from broker.filter.consumer_filters import SQL92, PropertyFilter, is_tag_type
from broker.filter.sql92 import SqlFilterError
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.metadata.topics import retry_topic
from broker.processors import missing_topic, validate
from broker.processors.consumer_manage import check_commit, refused_commit_log
from broker.processors.status_map import get_code, pull_remark
from common.perm import perm_readable, perm_text
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.message_codec import TagFilter
from remoting.message_headers import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND, PullHeader

MAX_MSG_NUMS = 1024  # per pull; the store's transfer caps usually cut earlier


@functools.lru_cache(maxsize=4096)
def _tag_filter(expression: str) -> TagFilter:
    return TagFilter(expression)


def _refuse(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    return response_to(request, code, remark)


Filters = tuple[TagFilter | None, PropertyFilter | None]


def _admit(
    ctx: BrokerContext, h: PullHeader, request: RemotingCommand
) -> tuple[SubscriptionGroupConfig, Filters] | RemotingCommand:
    """The group config and filters (tags, SQL92; None: everything) of a valid pull, or the refusal."""
    bad = validate.group_name(h.consumer_group) or validate.topic_name(h.topic)
    if bad:
        return _refuse(request, bad.code, bad.remark)
    if h.max_msg_nums <= 0:
        return _refuse(
            request, ResponseCode.INVALID_PARAMETER, f"maxMsgNums={h.max_msg_nums}; ask for 1..{MAX_MSG_NUMS}"
        )
    group = ctx.groups.get(h.consumer_group)
    if group is None:
        group = ctx.groups.find_or_create(h.consumer_group)
        if group is not None:
            ctx.groups_changed()
    if group is None:
        return _refuse(
            request,
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            ctx.groups.refusal_remark(h.consumer_group, ctx.broker_name),
        )
    if not group.consume_enable:
        return _refuse(
            request, ResponseCode.NO_PERMISSION, f"group {h.consumer_group} has consumeEnable=false; enable it first"
        )
    if not perm_readable(ctx.settings.broker.broker_permission):
        return _refuse(
            request, ResponseCode.NO_PERMISSION, f"broker {ctx.broker_name} is not readable; pull from another broker"
        )
    topic = ctx.topics.get(h.topic)
    if topic is None and h.topic == retry_topic(h.consumer_group) and not ctx.is_slave:
        # The group's own retry topic exists as soon as anyone asks for it (RocketMQ creates it on heartbeat).
        topic, created = ctx.topics.create_retry_topic(h.consumer_group, group.retry_queue_nums)
        if created:
            ctx.retry_topics_changed()
    if topic is None:
        return _refuse(
            request,
            ResponseCode.TOPIC_NOT_EXIST,
            missing_topic.topic_not_exist(
                ctx, h.topic, f"create it (mqctl updateTopic -t {h.topic}) or refresh the route"
            ),
        )
    if not perm_readable(topic.perm):
        return _refuse(
            request, ResponseCode.NO_PERMISSION, f"topic {h.topic} is not readable (perm {perm_text(topic.perm)})"
        )
    bad = validate.queue_id(h.queue_id, topic.read_queue_nums, h.topic, "read")
    if bad:
        return _refuse(request, bad.code, bad.remark)
    filters = _subscription(ctx, h, request)
    if isinstance(filters, RemotingCommand):
        return filters
    return group, filters


def _subscription(ctx: BrokerContext, h: PullHeader, request: RemotingCommand) -> Filters | RemotingCommand:
    if h.sys_flag & PULL_SUBSCRIPTION:
        expression_type, expression = h.expression_type or "TAG", h.subscription or "*"
    else:
        info = ctx.clients.consumer_group(h.consumer_group)
        if info is None:
            return _refuse(
                request,
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's group info not exist: group {h.consumer_group} sent no HEART_BEAT to broker"
                f" {ctx.broker_name}; send one, or pull with the SUBSCRIPTION flag and an expression",
            )
        sub = info.subscriptions.get(h.topic)
        if sub is None:
            return _refuse(
                request,
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription not exist: group {h.consumer_group} does not subscribe {h.topic} in"
                " its heartbeat; subscribe it and send a HEART_BEAT",
            )
        if sub.sub_version < h.sub_version:
            return _refuse(
                request,
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                f"the consumer's subscription not latest: registered subVersion {sub.sub_version} is older than"
                f" {h.sub_version}; send a HEART_BEAT first",
            )
        expression_type, expression = sub.expression_type, sub.sub_string
    if not is_tag_type(expression_type):
        return _property_filter(ctx, h, request, expression_type, expression)
    tag_filter = _tag_filter(expression)
    if not tag_filter.match_all and not tag_filter.tags:
        return _refuse(
            request,
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"subscription {expression!r} names no tag; use '*' or 'tagA || tagB'",
        )
    return None if tag_filter.match_all else tag_filter, None


def _property_filter(
    ctx: BrokerContext, h: PullHeader, request: RemotingCommand, expression_type: str, expression: str
) -> Filters | RemotingCommand:
    if expression_type != SQL92 or not ctx.settings.broker.enable_property_filter:
        return _refuse(  # RocketMQ answers 1; its consumers retry a failed pull whatever the code
            request,
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by {expression_type}; "
            + (f"set enablePropertyFilter=true on broker {ctx.broker_name}" if expression_type == SQL92
               else "use TAG or SQL92"),
        )
    try:
        return None, ctx.filters.get(h.consumer_group, h.topic, expression)
    except SqlFilterError as exc:
        return _refuse(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))


def _read(
    ctx: BrokerContext,
    h: PullHeader,
    request: RemotingCommand,
    group: SubscriptionGroupConfig,
    filters: Filters,
) -> tuple[RemotingCommand, int, int, int]:
    """(answer, message count, bytes, suggested broker id) of one read from the store."""
    result = ctx.store.get_message(
        h.consumer_group,
        h.topic,
        h.queue_id,
        h.queue_offset,
        min(h.max_msg_nums, MAX_MSG_NUMS),
        max_total_bytes=max(0, h.max_msg_bytes or 0),
        tag_filter=filters[0],
        record_filter=filters[1],
        confirmed_only=True,
    )
    code = get_code(result.status, h.queue_offset)
    suggest = read_advice.suggest_broker_id(
        slave_read_enable=ctx.settings.broker.slave_read_enable,
        suggest_pulling_from_slave=result.suggest_pulling_from_slave,
        group_broker_id=group.broker_id,
        which_broker_when_consume_slowly=group.which_broker_when_consume_slowly,
    )
    next_begin = result.next_begin_offset
    remark = pull_remark(code, result.status)
    if code == ResponseCode.PULL_OFFSET_MOVED:
        # spec §4.2: a slave with offsetCheckInSlave=false never corrects the consumer's offset.
        advice = read_advice.offset_moved_advice(
            role_is_slave=ctx.is_slave,
            offset_check_in_slave=ctx.settings.store.offset_check_in_slave,
            group_broker_id=group.broker_id,
        )
        if advice.override_suggest:
            suggest = advice.suggest_broker_id
        if not advice.correct_offset:
            next_begin = h.queue_offset
        if advice.code != code:
            code = advice.code
            remark = (
                f"{result.status.value}: this slave does not correct offsets (offsetCheckInSlave=false);"
                f" pull from broker {suggest}"
            )
    count = result.message_count
    if count:
        ctx.stats.get.add(count)
    answer = response_to(
        request,
        code,
        remark,
        ext={
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(next_begin),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        },
        body=result.buffers if code == ResponseCode.SUCCESS else b"",
    )
    return answer, count, result.total_bytes, suggest


def serve_pull(ctx: BrokerContext, conn: Connection, request: RemotingCommand):
    h = PullHeader.parse(request.ext)
    admitted = _admit(ctx, h, request)
    if isinstance(admitted, RemotingCommand):
        return admitted
    group, filters = admitted
    if h.sys_flag & PULL_COMMIT_OFFSET and not ctx.is_slave:
        _commit(ctx, conn, h)
    answer, count, size, suggest = _read(ctx, h, request, group, filters)
    if answer.code == ResponseCode.PULL_NOT_FOUND and h.sys_flag & PULL_SUSPEND:
        return _held(ctx, conn, h, request, group, filters)
    _count(ctx, h, count, size, suggest)
    return answer


def _commit(ctx: BrokerContext, conn: Connection, h: PullHeader) -> None:
    """The COMMIT_OFFSET flag: stored when ``check_commit`` finds it possible. A pull is answered whatever its
    commit, so a refused one (an offset past the queue's max) is one rate-limited warning, as for a oneway commit;
    the pull's own answer (PULL_OFFSET_MOVED for an offset past the max) corrects such a consumer."""
    refusal = check_commit(ctx, h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    if refusal is None:
        ctx.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    else:
        refused_commit_log.warning("ignored the COMMIT_OFFSET of a pull from %s: %s", conn.peer, refusal.remark)


async def _held(
    ctx: BrokerContext,
    conn: Connection,
    h: PullHeader,
    request: RemotingCommand,
    group: SubscriptionGroupConfig,
    filters: Filters,
) -> RemotingCommand:
    broker = ctx.settings.broker
    limit_ms = broker.broker_suspend_max_time_millis
    hold_ms = min(h.suspend_timeout_millis or limit_ms, limit_ms)
    async with conn.parked():  # waits for data, not for work: the connection's other requests go on meanwhile
        if broker.long_polling_enable:
            await ctx.hold.hold(h.topic, h.queue_id, h.queue_offset, hold_ms / 1000)
        else:
            await ctx.hold.sleep(min(broker.short_polling_time_mills, hold_ms) / 1000)
    answer, count, size, suggest = _read(ctx, h, request, group, filters)
    _count(ctx, h, count, size, suggest)
    return answer


def _count(ctx: BrokerContext, h: PullHeader, count: int, size: int, suggest: int) -> None:
    """One metrics call per request."""
    if ctx.metrics is not None:
        ctx.metrics.on_pull(h.topic, h.consumer_group, count, size, suggest != 0)


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.PULL_MESSAGE, lambda conn, request: serve_pull(ctx, conn, request))
