"""Consumer and queue offsets (RocketMQ ConsumerManageProcessor and AdminBrokerProcessor; spec remoting.md §2.3):
QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32). Answers carry the header ``offset`` (or
``timestamp`` for 32).

QUERY_CONSUMER_OFFSET with nothing committed answers 0 when the queue still starts at offset 0 (consuming from
there loses nothing), else 22 QUERY_NOT_FOUND with RocketMQ's remark (clients then apply consumeFromWhere).

UPDATE_CONSUMER_OFFSET (often oneway) has no role check: a slave accepts commits while its master is down, and
the monotonic merge of the metadata sync carries them back to the master, so offsets never roll back. A commit is
stored only when it can be true (reliability.md §7 case 24), else refused and nothing changes (nor syncs to a
slave): a negative queue id or offset, 29 INVALID_PARAMETER; a group this broker does not know, 26
SUBSCRIPTION_GROUP_NOT_EXIST, and a topic it does not know, 17 TOPIC_NOT_EXIST (both as RocketMQ 5 answers, with
its remarks ``Group <g> not exist!`` / ``Topic <t> not exist!``; a consumer's heartbeat or pull creates its group);
a queue id past the topic's queues or an offset past the queue's max offset (the offset of the next message to
be stored), 29. RocketMQ stores such offsets as sent; an offset past the max is refused rather than clamped, so
the caller learns it and nothing it did not consume is marked consumed (a consumer that read from a master commits
at most that master's max; committed to a lagging slave it is refused until the slave has those messages, and the
consumer commits it again). The same check guards the pull's COMMIT_OFFSET flag (``check_commit``). A oneway
commit cannot be answered: its refusal is one rate-limited warning line.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from broker.context import BrokerContext
from broker.processors import validate
from common.log import RateLimitedLog
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields, HeaderError

log = logging.getLogger(__name__)
refused_commit_log = RateLimitedLog(log)

NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


class CommitRefusal(NamedTuple):
    code: ResponseCode
    remark: str


def check_commit(ctx: BrokerContext, group: str, topic: str, queue_id: int, offset: int) -> CommitRefusal | None:
    """Why committing ``offset`` for ``group`` on ``topic``/``queue_id`` cannot be right, or None."""
    if queue_id < 0 or offset < 0:
        return CommitRefusal(
            ResponseCode.INVALID_PARAMETER, f"queueId {queue_id} and commitOffset {offset} must not be negative"
        )
    if ctx.groups.get(group) is None:
        return CommitRefusal(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"Group {group} not exist! on broker {ctx.broker_name}: a consumer's HEART_BEAT or pull creates it,"
            f" an admin with mqctl updateSubGroup -g {group}",
        )
    cfg = ctx.topics.get(topic)
    if cfg is None:
        return CommitRefusal(
            ResponseCode.TOPIC_NOT_EXIST,
            f"Topic {topic} not exist! on broker {ctx.broker_name}; refresh the route and commit to a broker that"
            " serves the topic",
        )
    bad = validate.queue_id(queue_id, max(cfg.read_queue_nums, cfg.write_queue_nums), topic, "read/write")
    if bad:
        return CommitRefusal(bad.code, bad.remark)
    high = ctx.store.max_offset_in_queue(topic, queue_id)
    if offset > high:
        return CommitRefusal(
            ResponseCode.INVALID_PARAMETER,
            f"commitOffset {offset} is past the max offset {high} of {topic} queue {queue_id} on broker"
            f" {ctx.broker_name}: commit the offset after the last message consumed (at most {high})",
        )
    return None


def log_refused_oneway(request: RemotingCommand, peer: str, remark: str) -> None:
    """A refused oneway request has no answer to carry the refusal: one rate-limited line instead."""
    refused_commit_log.warning("refused a oneway request code %d from %s: %s", request.code, peer, remark)


def _queue(request: RemotingCommand, what: str) -> tuple[Fields, str, int]:
    f = Fields(request.ext, what)
    return f, f.req_str("topic"), f.req_int("queueId")


def _bad_names(request: RemotingCommand, group: str | None, topic: str) -> RemotingCommand | None:
    bad = (validate.group_name(group) if group is not None else None) or validate.topic_name(topic)
    return response_to(request, bad.code, bad.remark) if bad else None


def _offset(request: RemotingCommand, offset: int, remark: str | None = None) -> RemotingCommand:
    return response_to(request, ResponseCode.SUCCESS, remark, ext={"offset": str(offset)})


def _query(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    f, topic, queue_id = _queue(request, "QUERY_CONSUMER_OFFSET")
    group = f.req_str("consumerGroup")
    bad = _bad_names(request, group, topic)
    if bad:
        return bad
    offset = ctx.offsets.query(group, topic, queue_id)
    if offset is not None:
        return _offset(request, offset)
    if ctx.store.min_offset_in_queue(topic, queue_id) <= 0:
        return _offset(request, 0, "no committed offset; the queue still starts at 0")
    return response_to(
        request,
        ResponseCode.QUERY_NOT_FOUND,
        f"{NOT_FOUND_REMARK}: group {group} has no committed offset for {topic} queue {queue_id};"
        " start from consumeFromWhere",
    )


def _update(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    try:
        f, topic, queue_id = _queue(request, "UPDATE_CONSUMER_OFFSET")
        group = f.req_str("consumerGroup")
        offset = f.req_long("commitOffset")
    except HeaderError as exc:
        if request.is_oneway:
            log_refused_oneway(request, conn.peer, str(exc))
        raise
    answer = _bad_names(request, group, topic)
    if answer is None:
        refusal = check_commit(ctx, group, topic, queue_id, offset)
        if refusal is None:
            ctx.offsets.commit(group, topic, queue_id, offset)
            return response_to(request, ResponseCode.SUCCESS)
        answer = response_to(request, refusal.code, refusal.remark)
    if request.is_oneway:
        log_refused_oneway(request, conn.peer, answer.remark or "")
    return answer


def _max(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    _, topic, queue_id = _queue(request, "GET_MAX_OFFSET")
    return _bad_names(request, None, topic) or _offset(request, ctx.store.max_offset_in_queue(topic, queue_id))


def _min(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    _, topic, queue_id = _queue(request, "GET_MIN_OFFSET")
    return _bad_names(request, None, topic) or _offset(request, ctx.store.min_offset_in_queue(topic, queue_id))


def _search(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    f, topic, queue_id = _queue(request, "SEARCH_OFFSET_BY_TIMESTAMP")
    timestamp = f.req_long("timestamp")
    return _bad_names(request, None, topic) or _offset(request, ctx.store.offset_by_time(topic, queue_id, timestamp))


def _earliest(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    _, topic, queue_id = _queue(request, "GET_EARLIEST_MSG_STORETIME")
    bad = _bad_names(request, None, topic)
    if bad:
        return bad
    first = ctx.store.min_offset_in_queue(topic, queue_id)
    timestamp = ctx.store.store_timestamp_at(topic, queue_id, first)
    return response_to(request, ResponseCode.SUCCESS, ext={"timestamp": str(timestamp)})


def register(server, ctx: BrokerContext) -> None:
    for code, fn in (
        (RequestCode.QUERY_CONSUMER_OFFSET, _query),
        (RequestCode.UPDATE_CONSUMER_OFFSET, _update),
        (RequestCode.GET_MAX_OFFSET, _max),
        (RequestCode.GET_MIN_OFFSET, _min),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, _search),
        (RequestCode.GET_EARLIEST_MSG_STORETIME, _earliest),
    ):
        server.register(code, lambda conn, request, fn=fn: fn(ctx, conn, request))
