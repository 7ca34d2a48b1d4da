"""The master's side of the slave's metadata sync (RocketMQ AdminBrokerProcessor; spec remoting.md §2.5, §5.5-§5.7).

No request header; each answer is the manager's table as RocketMQ writes it::

    GET_ALL_TOPIC_CONFIG 21              {"dataVersion":DV,"topicConfigTable":{topic:TopicConfig}}
    GET_ALL_CONSUMER_OFFSET 43           {"dataVersion":DV,"offsetTable":{"topic@group":{queueId:offset}},
                                          "resetVersion":{key:ms}}
    GET_ALL_DELAY_OFFSET 45              {"dataVersion":DV,"offsetTable":{level:offset}}
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201 {"dataVersion":DV,"subscriptionGroupTable":{group:SubscriptionGroupConfig}}

RocketMQ 5's classes whole (its strict readers, rocketmq-rust's, need every field): DV =
``{"counter":L,"stateVersion":L,"timestamp":L}`` (``stateVersion`` always 0 here); each TopicConfig carries
``attributes`` (``{}``: pyrmq has no topic attributes); each SubscriptionGroupConfig is ``wire_json``'s
(remoting/subscription_group.py). pyrmq keeps no version of its offset tables (43, 45), so their DV is counter 0
stamped with the broker's boot time, as GET_BROKER_CONFIG's.
``resetVersion`` is pyrmq's: per ``topic@group``, the time of the last explicit offset reset, so the other node's
merge can tell a deliberate rewind from a stale table (``broker/metadata/consumer_offsets.py``; RocketMQ #1094). A
RocketMQ slave reads ConsumerOffsetSerializeWrapper and ignores it.

Empty tables answer SUCCESS with an empty table, where RocketMQ answers 1: an empty master is not a broken one. A
slave serves these codes too: a master that restarts pulls the offsets its slaves accepted while it was down
(``broker/slave_sync.py``).

A pyrmq slave's GET_ALL_TOPIC_CONFIG carries ``notifyMetadataChange=true``: on a master its connection then gets
NOTIFY_METADATA_CHANGED pushes; the slave sends the same code back (ONEWAY) with the DataVersion counters it holds
after a pull, which tell updateTopic / updateSubGroup when the slave holds their change (``broker/slave_notify.py``).
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from broker.slave_notify import GROUPS, SUBSCRIBE_FIELD, TOPICS
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to


def with_state_version(wrapper: dict[str, Any]) -> dict[str, Any]:
    """A ``{"dataVersion": ...}`` wrapper whose DataVersion carries ``stateVersion`` (strict 5.x readers want it)."""
    version = dict(wrapper.get("dataVersion") or {})
    version.setdefault("stateVersion", 0)
    return {**wrapper, "dataVersion": dict(sorted(version.items()))}


def _answer(request: RemotingCommand, table: dict[str, Any]) -> RemotingCommand:
    return response_to(request, ResponseCode.SUCCESS, body=fastjson.dumps(table))


def topic_configs(ctx: BrokerContext) -> dict[str, Any]:
    wrapper = with_state_version(ctx.topics.to_json())
    table = wrapper["topicConfigTable"]
    wrapper["topicConfigTable"] = {name: {"attributes": {}, **cfg} for name, cfg in table.items()}
    return wrapper


def subscription_groups(ctx: BrokerContext) -> dict[str, Any]:
    groups, version = ctx.groups.snapshot()
    return with_state_version(
        {"dataVersion": version.to_json(), "subscriptionGroupTable": {g.group_name: g.wire_json() for g in groups}}
    )


def boot_versioned(ctx: BrokerContext, table: dict[str, Any]) -> dict[str, Any]:
    """An unversioned table with the DataVersion RocketMQ 5's wrapper carries: counter 0 at the boot time."""
    return {"dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": ctx.boot_timestamp_ms}, **table}


def _subscriber(ctx: BrokerContext, conn, request: RemotingCommand) -> bool:
    """A pyrmq slave's sync request asks to be told of changes (``broker/slave_notify.py``); a master only."""
    notifier = ctx.slave_notifier
    if notifier is None:
        return False
    if (request.ext or {}).get(SUBSCRIBE_FIELD) == "true" and notifier.subscribe(conn):
        return True
    return id(conn) in notifier.subscribers


def all_topics(ctx: BrokerContext, conn, request: RemotingCommand) -> RemotingCommand:
    _subscriber(ctx, conn, request)
    return _answer(request, topic_configs(ctx))


def held(ctx: BrokerContext, conn, request: RemotingCommand) -> None:
    """NOTIFY_METADATA_CHANGED from a subscribed slave (ONEWAY): the DataVersion counters it now holds."""
    notifier = ctx.slave_notifier
    if notifier is None or id(conn) not in notifier.subscribers:
        return None
    ext = request.ext or {}
    for kind in (TOPICS, GROUPS):
        value = ext.get(kind)
        if value is not None and value.isdigit():
            notifier.held(conn, kind, int(value))
    return None


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.GET_ALL_TOPIC_CONFIG, lambda conn, req: all_topics(ctx, conn, req))
    server.register(
        RequestCode.GET_ALL_CONSUMER_OFFSET, lambda conn, req: _answer(req, boot_versioned(ctx, ctx.offsets.to_json()))
    )
    server.register(
        RequestCode.GET_ALL_DELAY_OFFSET,
        lambda conn, req: _answer(req, boot_versioned(ctx, ctx.delay_offsets.to_json())),
    )
    server.register(
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, lambda conn, req: _answer(req, subscription_groups(ctx))
    )
    server.register(RequestCode.NOTIFY_METADATA_CHANGED, lambda conn, req: held(ctx, conn, req))
