"""Admin: topics (RocketMQ AdminBrokerProcessor; spec remoting.md §2.4, §5.8).

- UPDATE_AND_CREATE_TOPIC (17), header ``CreateTopicRequestHeader``: ``topic``, ``readQueueNums``,
  ``writeQueueNums``, ``perm`` (required), ``topicSysFlag``, ``order`` (optional). Java clients also send
  ``defaultTopic`` and ``topicFilterType``; both are accepted and unused (pyrmq topics are SINGLE_TAG). Creates or
  replaces the topic, persists ``topics.json`` and registers with the nameservers at once, and answers once that
  registration round ended (at most ``REGISTER_WAIT_S``), as RocketMQ registers before it answers: a route read
  right after the answer shows the topic. The remark says which nameservers accepted it; a round that did not
  end in time, or that a nameserver missed, still answers SUCCESS (the topic is saved), with a remark that the
  route follows at the next round.
- DELETE_TOPIC_IN_BROKER (215), ``topic``: drops the topic, its consume queues and its consumer offsets. A topic
  this broker does not have answers SUCCESS with a remark saying so, as RocketMQ does: ``mqadmin deleteTopic``
  sends 215 to every master of the cluster and stops at the first error.
- GET_TOPIC_STATS_INFO (202), ``topic``: TopicStatsTable, one entry per write queue,
  ``{"offsetTable":{{"brokerName":S,"queueId":I,"topic":S}:{"lastUpdateTimestamp":L,"maxOffset":L,"minOffset":L}},
  "topicPutTps":D}`` with the MessageQueue keys written inline as fastjson writes them; 17 for an unknown topic.
  ``topicPutTps`` (RocketMQ 5's, which rocketmq-rust requires): messages stored in the topic per second over about
  the last minute, measured between this request and earlier ones (``admin_rates.PutRate``; 0 at the first).

Writes are refused on a slave (it copies the master's table; spec §2.5) with RocketMQ's remark and 16
NO_PERMISSION. A bad name, queue counts outside 1..1024 or an invalid perm answer 29 INVALID_PARAMETER, a system
topic (or the cluster's name) 16, each with a remark that says what to change. RocketMQ answers 1 to all of these;
no RocketMQ client or tool branches on that code (they raise it as MQBrokerException/MQClientException), and 1 tells
a pyrmq caller, like a RocketMQ producer, that retrying may help, which it never does here (issue 12 item 10).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any

from broker.context import BrokerContext
from broker.metadata.topics import TopicConfig
from broker.processors import missing_topic, validate
from broker.processors.admin_rates import PutRate
from broker.slave_notify import TOPICS, slaves_hold
from common.perm import perm_valid
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields

# RocketMQ's text (AdminBrokerProcessor#validateSlave), followed by ours naming the broker.
SLAVE_REFUSAL = "Can't modify topic or subscription group from slave broker, please execute it from master broker"


# How long UPDATE_AND_CREATE_TOPIC waits for the registration that carries the topic (RocketMQ: a synchronous
# registration bounded by registerBrokerTimeoutMills, 6 s by default; mqadmin's own timeout is 3 s+).
REGISTER_WAIT_S = 3.0

AdminHandler = Callable[[BrokerContext, Any, RemotingCommand], Any]  # a RemotingCommand, or a coroutine of one


def master_only(handler: AdminHandler) -> AdminHandler:
    """A topic or group write: on a slave it answers 16 NO_PERMISSION (RocketMQ's remark; RocketMQ's code is 1)
    instead of running ``handler``."""

    @functools.wraps(handler)
    def guarded(ctx: BrokerContext, conn: Any, request: RemotingCommand) -> RemotingCommand:
        if ctx.is_slave:
            return response_to(
                request, ResponseCode.NO_PERMISSION, f"{SLAVE_REFUSAL}; {ctx.slave_refusal('modify on the master')}"
            )
        return handler(ctx, conn, request)

    return guarded


def message_queue(topic: str, broker_name: str, queue_id: int) -> fastjson.FrozenObject:
    """A MessageQueue as a map key (written inline: ``{"brokerName":S,"queueId":I,"topic":S}``)."""
    return fastjson.FrozenObject.of({"brokerName": broker_name, "queueId": queue_id, "topic": topic})


@master_only
async def update(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    f = Fields(request.ext, "UPDATE_AND_CREATE_TOPIC")
    topic = f.req_str("topic")
    read_nums, write_nums, perm = f.req_int("readQueueNums"), f.req_int("writeQueueNums"), f.req_int("perm")
    bad = validate.admin_topic(topic) or validate.queue_nums(read_nums, write_nums)
    if bad:
        return response_to(request, bad.code, bad.remark)
    if topic == ctx.settings.broker.broker_cluster_name:
        return response_to(
            request,
            ResponseCode.NO_PERMISSION,
            f"topic {topic} is the cluster's name, which RocketMQ reserves as a system topic; choose another name",
        )
    if not perm_valid(perm):
        return response_to(
            request,
            ResponseCode.INVALID_PARAMETER,
            f"perm {perm} is invalid; use 2 (W), 4 (R) or 6 (RW), plus 1 (inherit)",
        )
    cfg = TopicConfig(
        topic_name=topic,
        read_queue_nums=read_nums,
        write_queue_nums=write_nums,
        perm=perm,
        topic_sys_flag=f.int("topicSysFlag", 0),
        order=f.bool("order", False),
    )
    ctx.topics.update(cfg)
    counter = ctx.topics.data_version.counter
    registered = ctx.register_now()  # what topics_changed() does, keeping the round's future to wait on
    saved = f"topic {topic} saved on {ctx.broker_name}"
    unsaved = await persist_topics(ctx, saved)
    if unsaved is not None:
        return response_to(request, ResponseCode.SYSTEM_ERROR, unsaved)
    saved += await slaves_hold(ctx.slave_notifier, TOPICS, counter)  # a master's SIGKILL now loses nothing of it
    if registered is None:  # no nameserver to tell (or stopping)
        return response_to(request, ResponseCode.SUCCESS, saved)
    try:
        outcome = await asyncio.wait_for(registered, REGISTER_WAIT_S)
    except TimeoutError:
        return response_to(
            request,
            ResponseCode.SUCCESS,
            f"{saved}; no nameserver confirmed its registration within {REGISTER_WAIT_S:g} s, so routes may lack it"
            " until the next registration round (the broker retries within seconds)",
        )
    if not outcome.accepted:
        return response_to(
            request,
            ResponseCode.SUCCESS,
            f"{saved}; no nameserver accepted its registration ({', '.join(outcome.missed)} missed it), so routes"
            " lack it until a registration round succeeds (the broker retries within seconds)",
        )
    missed = f"; {', '.join(outcome.missed)} missed it and gets it at the next round" if outcome.missed else ""
    return response_to(
        request, ResponseCode.SUCCESS, f"{saved} and registered with {', '.join(outcome.accepted)}{missed}"
    )


async def persist_topics(ctx: BrokerContext, done: str) -> str | None:
    """Wait until topics.json holds the change (mqadmin treats SUCCESS as saved; concurrent changes share one
    write); the remark of a failed write, else None."""
    try:
        await ctx.topics.persist()
    except OSError as exc:
        return (f"{done} in memory, but writing {ctx.topics.path} failed ({exc}); free space or fix the store's"
                " permissions: it is retried, and lost at a crash until then")
    return None


@master_only
async def delete(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    topic = Fields(request.ext, "DELETE_TOPIC_IN_BROKER").req_str("topic")
    bad = validate.admin_topic(topic)
    if bad:
        return response_to(request, bad.code, bad.remark)
    existed = ctx.topics.delete(topic)
    ctx.store.delete_topic(topic)
    dropped = ctx.offsets.remove_topic(topic)
    ctx.topics_changed()
    if dropped:
        ctx.spawn(ctx.offsets.persist(), "persist-offsets")
    if not existed:
        return response_to(
            request, ResponseCode.SUCCESS, f"topic {topic} does not exist on {ctx.broker_name}; nothing to delete"
        )
    unsaved = await persist_topics(ctx, f"topic {topic} deleted")
    if unsaved is not None:
        return response_to(request, ResponseCode.SYSTEM_ERROR, unsaved)
    return response_to(
        request,
        ResponseCode.SUCCESS,
        f"topic {topic} deleted from {ctx.broker_name} with {dropped} consumer offset entries",
    )


def stats(ctx: BrokerContext, rates: PutRate, conn, request: RemotingCommand) -> RemotingCommand:
    topic = Fields(request.ext, "GET_TOPIC_STATS_INFO").req_str("topic")
    cfg = ctx.topics.get(topic)
    if cfg is None:
        return response_to(
            request,
            ResponseCode.TOPIC_NOT_EXIST,
            missing_topic.topic_not_exist(ctx, topic, "create it with updateTopic or check the name"),
        )
    store = ctx.store
    table = {}
    stored = 0
    for qid in range(cfg.write_queue_nums):
        lo = max(0, store.min_offset_in_queue(topic, qid))
        hi = max(0, store.max_offset_in_queue(topic, qid))
        last = store.store_timestamp_at(topic, qid, hi - 1) if hi > 0 else 0
        stored += hi
        table[message_queue(topic, ctx.broker_name, qid)] = {
            "lastUpdateTimestamp": max(0, last or 0),
            "maxOffset": hi,
            "minOffset": lo,
        }
    put_tps = round(rates.rate(topic, stored, time.monotonic()), 2)
    body = fastjson.dumps({"offsetTable": table, "topicPutTps": float(put_tps)})
    return response_to(request, ResponseCode.SUCCESS, body=body)


def register(server, ctx: BrokerContext) -> None:
    rates = PutRate()
    server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, lambda conn, req: update(ctx, conn, req))
    server.register(RequestCode.DELETE_TOPIC_IN_BROKER, lambda conn, req: delete(ctx, conn, req))
    server.register(RequestCode.GET_TOPIC_STATS_INFO, lambda conn, req: stats(ctx, rates, conn, req))
