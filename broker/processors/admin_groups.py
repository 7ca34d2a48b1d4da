"""Admin: subscription groups, consume progress, connections (RocketMQ AdminBrokerProcessor; spec §2.4, §5.7, §5.8).

- UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), body SubscriptionGroupConfig with RocketMQ 4.9.7's names
  (``groupName``, ``consumeEnable``, ``consumeFromMinEnable``, ``consumeBroadcastEnable``, ``retryQueueNums``,
  ``retryMaxTimes``, ``brokerId``, ``whichBrokerWhenConsumeSlowly``, ``notifyConsumerIdsChangedEnable``), and RocketMQ 5's
  ``consumeMessageOrderly`` (FIFO pop for RocketMQ 5 clients). A field left out takes RocketMQ's default; RocketMQ 5's
  other extra fields (retry policy, attributes, ...) are ignored. A value
  of the wrong JSON type, or out of range, answers 29 INVALID_PARAMETER naming the field (RocketMQ: 1).
- DELETE_SUBSCRIPTIONGROUP (207), header ``groupName``; ``removeOffset`` (4.9.7) or ``cleanOffset`` (5.x) true
  also drops the group's consumer offsets. A group this broker does not have answers SUCCESS with a remark, as
  RocketMQ does (``mqadmin deleteSubGroup -c`` asks every master and stops at the first error).
- GET_SUBSCRIPTIONGROUP_CONFIG (352, RocketMQ 5's), header ``group``: the group's SubscriptionGroupConfig, RocketMQ
  5's whole class (``SubscriptionGroupConfig.wire_json``); 26 SUBSCRIPTION_GROUP_NOT_EXIST naming the group when
  this broker does not have it. Served by a slave too (it holds the master's copy).
- GET_CONSUME_STATS (208), header ``consumerGroup``, ``topic`` (blank: every topic the group has offsets for, plus
  its retry topic): ConsumeStats ``{"consumeTps":D,"offsetTable":{MQ:{"brokerOffset":L,"consumerOffset":L,
  "lastTimestamp":L,"pullOffset":L}}}``, one entry per read queue, MessageQueue keys inline. Like RocketMQ, a topic
  the group's online consumers no longer subscribe to is left out, and no progress at all is an empty table with
  code 0. ``pullOffset`` - ``consumerOffset`` is what RocketMQ 5's mqadmin shows as #Inflight: for a pop group (RocketMQ
  5 clients; its offset is committed at receive) the messages received and not yet acked or revived, else 0.
  ``consumeTps``: messages pulled by the group per second over about the last minute (``ConsumeRate``).
- GET_CONSUMER_CONNECTION_LIST (203), ``consumerGroup``: ConsumerConnection ``{"connectionSet":[Connection],
  "consumeFromWhere":S,"consumeType":S,"messageModel":S,"subscriptionTable":{topic:SubscriptionData}}``;
  206 CONSUMER_NOT_ONLINE when no consumer of the group is connected.
- GET_PRODUCER_CONNECTION_LIST (204), ``producerGroup``: ProducerConnection ``{"connectionSet":[Connection]}``;
  1 when no producer of the group is connected (RocketMQ's code and text: the state may change, so trying again
  later is right). Connection = ``{"clientAddr":S,"clientId":S,"language":S,
  "version":I}`` (what the client said in its HEART_BEAT's command header).

Group writes are refused on a slave with RocketMQ's remark and 16 NO_PERMISSION (``admin_topics.master_only``).
Updates and deletes answer once subscriptionGroup.json holds them (batched with concurrent changes); a failed write
answers 1 SYSTEM_ERROR saying the change is in memory only.
"""

from __future__ import annotations

import time
from dataclasses import fields

from broker.context import BrokerContext
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.metadata.topics import retry_topic
from broker.processors import validate
from broker.processors.admin_rates import ConsumeRate
from broker.processors.admin_topics import master_only, message_queue
from broker.slave_notify import GROUPS, slaves_hold
from common.conf import conf_key
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields

_GROUP_FIELDS = {conf_key(f): f for f in fields(SubscriptionGroupConfig)}


def parse_group_config(body: bytes) -> SubscriptionGroupConfig | str:
    """The 200 body as a config, or the text of what is wrong with it."""
    try:
        obj = fastjson.loads(body) if body else None
    except (fastjson.JsonBodyError, UnicodeDecodeError) as exc:
        return f"the body is not JSON ({exc}); send a SubscriptionGroupConfig object"
    if not isinstance(obj, dict):
        return "the body must be a SubscriptionGroupConfig JSON object with at least groupName"
    kwargs = {}
    for key, f in _GROUP_FIELDS.items():
        if key not in obj or obj[key] is None:
            continue
        value = obj[key]
        want = f.type if isinstance(f.type, str) else f.type.__name__
        if want == "bool" and not isinstance(value, bool):
            return f"{key}={value!r} must be true or false"
        if want == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            return f"{key}={value!r} must be an integer"
        if want == "str" and not isinstance(value, str):
            return f"{key}={value!r} must be a string"
        kwargs[f.name] = value
    if "group_name" not in kwargs:
        return "groupName is missing; name the subscription group"
    return SubscriptionGroupConfig(**kwargs)


async def _saved(ctx: BrokerContext, request: RemotingCommand, done: str) -> RemotingCommand:
    """Answer once the change is on disk and on the subscribed slaves (bounded; ``broker/slave_notify.py``):
    mqadmin treats SUCCESS as saved. Concurrent admin changes (and the auto-created groups around them) share one
    write of subscriptionGroup.json."""
    counter = ctx.groups.data_version.counter
    try:
        await ctx.groups.persist()
    except OSError as exc:
        return response_to(
            request,
            ResponseCode.SYSTEM_ERROR,
            f"{done} in memory, but writing {ctx.groups.path} failed ({exc}); free space or fix the store's"
            " permissions, it is retried and lost at a crash until then",
        )
    return response_to(request, ResponseCode.SUCCESS, done + await slaves_hold(ctx.slave_notifier, GROUPS, counter))


@master_only
def update(ctx: BrokerContext, conn, request: RemotingCommand):
    cfg = parse_group_config(request.body_bytes())
    if isinstance(cfg, str):
        return response_to(request, ResponseCode.INVALID_PARAMETER, f"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: {cfg}")
    bad = validate.group_name(cfg.group_name)
    if bad:
        return response_to(request, bad.code, bad.remark)
    if not 1 <= cfg.retry_queue_nums <= validate.MAX_QUEUE_NUMS or cfg.retry_max_times < 0 or cfg.broker_id < 0:
        return response_to(
            request,
            ResponseCode.INVALID_PARAMETER,
            f"retryQueueNums must be 1..{validate.MAX_QUEUE_NUMS}, retryMaxTimes and brokerId must not be negative;"
            f" got {cfg.retry_queue_nums}, {cfg.retry_max_times}, {cfg.broker_id}",
        )
    ctx.groups.update(cfg)
    ctx.groups_changed()
    return _saved(ctx, request, f"group {cfg.group_name} saved on {ctx.broker_name}")


@master_only
def delete(ctx: BrokerContext, conn, request: RemotingCommand):
    f = Fields(request.ext, "DELETE_SUBSCRIPTIONGROUP")
    group = f.req_str("groupName")
    bad = validate.group_name(group)
    if bad:
        return response_to(request, bad.code, bad.remark)
    existed = ctx.groups.delete(group)
    dropped = 0
    if f.bool("removeOffset") or f.bool("cleanOffset"):
        dropped = ctx.offsets.remove_group(group)
        if dropped:
            ctx.spawn(ctx.offsets.persist(), "persist-offsets")
    what = "deleted" if existed else "does not exist here; nothing deleted"
    done = f"group {group} {what} on {ctx.broker_name}; {dropped} offset entries removed"
    if not existed:
        return response_to(request, ResponseCode.SUCCESS, done)
    ctx.groups_changed()
    return _saved(ctx, request, done)


def group_config(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    group = Fields(request.ext, "GET_SUBSCRIPTIONGROUP_CONFIG").req_str("group")
    cfg = ctx.groups.get(group)
    if cfg is None:
        return response_to(
            request,
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group {group} does not exist on broker {ctx.broker_name}; create it with"
            f" updateSubGroup -g {group}, or check the name",
        )
    return response_to(request, ResponseCode.SUCCESS, body=fastjson.dumps(cfg.wire_json()))


def consume_stats(ctx: BrokerContext, rates: ConsumeRate, conn, request: RemotingCommand) -> RemotingCommand:
    f = Fields(request.ext, "GET_CONSUME_STATS")
    group = f.req_str("consumerGroup")
    topic = (f.str("topic") or "").strip()
    if topic:
        topics = [topic]
    else:
        topics = ctx.offsets.topics_of_group(group)
        if retry_topic(group) in ctx.topics and retry_topic(group) not in topics:
            topics.append(retry_topic(group))
    subscribed = ctx.clients.subscriptions(group)
    in_flight = ctx.pop.queue_progress(group) if ctx.pop is not None else {}
    store = ctx.store
    table = {}
    tps = 0.0
    now_s = time.monotonic()
    for name in topics:
        cfg = ctx.topics.get(name)
        if cfg is None:
            continue
        if subscribed and name not in subscribed and name != retry_topic(group):
            continue  # the group's consumers no longer subscribe to it (RocketMQ skips it too)
        committed = ctx.offsets.queues_of(group, name)
        for qid in range(cfg.read_queue_nums):
            consumer_offset = max(0, committed.get(qid, 0))
            last = store.store_timestamp_at(name, qid, consumer_offset - 1) if consumer_offset > 0 else 0
            table[message_queue(name, ctx.broker_name, qid)] = {
                "brokerOffset": max(0, store.max_offset_in_queue(name, qid)),
                "consumerOffset": consumer_offset,
                "lastTimestamp": max(0, last or 0),
                "pullOffset": consumer_offset + in_flight.get((name, qid), (0, 0))[1],
            }
        if ctx.metrics is not None:
            tps += rates.rate((name, group), ctx.metrics.pulled_messages(name, group), now_s)
    remark = None if table else f"group {group} has no consume progress on {ctx.broker_name}"
    body = fastjson.dumps({"consumeTps": round(tps, 2), "offsetTable": table})
    return response_to(request, ResponseCode.SUCCESS, remark, body=body)


def _connection(channel) -> dict:
    """A ``broker.client_manager.ClientChannel`` as RocketMQ's Connection."""
    return {
        "clientAddr": channel.addr,
        "clientId": channel.client_id,
        "language": channel.language or "OTHER",
        "version": channel.version,
    }


def consumer_connections(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    group = Fields(request.ext, "GET_CONSUMER_CONNECTION_LIST").req_str("consumerGroup")
    info = ctx.clients.consumer_group(group)
    if info is None or not info.channels:
        return response_to(
            request,
            ResponseCode.CONSUMER_NOT_ONLINE,
            f"the consumer group[{group}] not online on {ctx.broker_name}; start a consumer of the group",
        )
    body = {
        "connectionSet": [_connection(c) for c in sorted(info.channels.values(), key=lambda c: c.client_id)],
        "consumeFromWhere": info.consume_from_where,
        "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "subscriptionTable": {topic: sub.as_json() for topic, sub in sorted(info.subscriptions.items())},
    }
    return response_to(request, ResponseCode.SUCCESS, body=fastjson.dumps(body))


def producer_connections(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    group = Fields(request.ext, "GET_PRODUCER_CONNECTION_LIST").req_str("producerGroup")
    members = sorted(ctx.clients.producer_channels(group), key=lambda c: c.client_id)
    if not members:
        return response_to(
            request,
            ResponseCode.SYSTEM_ERROR,
            f"the producer group[{group}] not exist on {ctx.broker_name}: no producer of it is connected",
        )
    body = {"connectionSet": [_connection(c) for c in members]}
    return response_to(request, ResponseCode.SUCCESS, body=fastjson.dumps(body))


def register(server, ctx: BrokerContext) -> None:
    rates = ConsumeRate(boot_s=time.monotonic())
    server.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, lambda conn, req: update(ctx, conn, req))
    server.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, lambda conn, req: delete(ctx, conn, req))
    server.register(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, lambda conn, req: group_config(ctx, conn, req))
    server.register(RequestCode.GET_CONSUME_STATS, lambda conn, req: consume_stats(ctx, rates, conn, req))
    server.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, lambda conn, req: consumer_connections(ctx, conn, req))
    server.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, lambda conn, req: producer_connections(ctx, conn, req))
