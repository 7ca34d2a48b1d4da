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
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
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


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.GET_ALL_TOPIC_CONFIG, lambda conn, req: _answer(req, topic_configs(ctx)))
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
