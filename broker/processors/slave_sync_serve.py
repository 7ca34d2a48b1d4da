"""The master's side of the slave's metadata sync (RocketMQ AdminBrokerProcessor; spec remoting.md §2.5, §5.5-§5.7).

No request header; each answer is the manager's table as RocketMQ writes it::

    GET_ALL_TOPIC_CONFIG 21              {"dataVersion":DV,"topicConfigTable":{topic:TopicConfig}}
    GET_ALL_CONSUMER_OFFSET 43           {"offsetTable":{"topic@group":{queueId:offset}},"resetVersion":{key:ms}}
    GET_ALL_DELAY_OFFSET 45              {"offsetTable":{level:offset}}
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201 {"dataVersion":DV,"subscriptionGroupTable":{group:SubscriptionGroupConfig}}

DV = ``{"counter":L,"stateVersion":L,"timestamp":L}`` (``stateVersion``, RocketMQ 5's, is always 0 here).
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


def register(server, ctx: BrokerContext) -> None:
    server.register(
        RequestCode.GET_ALL_TOPIC_CONFIG, lambda conn, req: _answer(req, with_state_version(ctx.topics.to_json()))
    )
    server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, lambda conn, req: _answer(req, ctx.offsets.to_json()))
    server.register(RequestCode.GET_ALL_DELAY_OFFSET, lambda conn, req: _answer(req, ctx.delay_offsets.to_json()))
    server.register(
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        lambda conn, req: _answer(req, with_state_version(ctx.groups.to_json())),
    )
