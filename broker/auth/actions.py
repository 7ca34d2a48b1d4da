"""What each remoting request needs: RocketMQ's ``DefaultAuthorizationContextBuilder`` and the
``@RocketMQAction`` / ``@RocketMQResource`` annotations of its request headers, for the codes pyrmq serves. Pure.

``needs(request)`` is a list of (resource, actions): every pair must be granted, and a pair is granted by an entry
covering any one of its actions (RocketMQ's lists, such as Sub-or-Get for an offset query). An empty list needs
nothing (a producer's heartbeat). ``None`` means the code is not in the table: only Super users may send it.
Differences from RocketMQ, on purpose: the offset codes check the group as a Group (RocketMQ 5.3 checks it as a
Topic, a slip), and the AUTH_* management codes are for Super users only.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.auth.model import Action, Need, Resource, ResourceType
from remoting import fastjson
from remoting.codes import RequestCode
from remoting.frame_codec import RemotingCommand

RETRY_PREFIX = "%RETRY%"

PUB = frozenset({Action.PUB})
SUB = frozenset({Action.SUB})
GET = frozenset({Action.GET})
SUB_GET = frozenset({Action.SUB, Action.GET})
SUB_UPDATE = frozenset({Action.SUB, Action.UPDATE})
PUB_SUB = frozenset({Action.PUB, Action.SUB})
PUB_SUB_GET = frozenset({Action.PUB, Action.SUB, Action.GET})
CREATE_UPDATE = frozenset({Action.CREATE, Action.UPDATE})
UPDATE = frozenset({Action.UPDATE})
DELETE = frozenset({Action.DELETE})
GET_LIST = frozenset({Action.GET, Action.LIST})
CLUSTER = Resource(ResourceType.CLUSTER)


def topic(name: str | None) -> Resource:
    return Resource(ResourceType.TOPIC, name or "")


def group(name: str | None) -> Resource:
    """A group by name; a retry topic's name stands for its group (RocketMQ's ``Resource.ofGroup``)."""
    name = name or ""
    if name.startswith(RETRY_PREFIX):
        name = name[len(RETRY_PREFIX):]
    return Resource(ResourceType.GROUP, name)


def is_retry(name: str | None) -> bool:
    return bool(name) and name.startswith(RETRY_PREFIX)  # type: ignore[union-attr]


def _send(topic_key: str, group_key: str) -> Callable[[RemotingCommand], list[Need]]:
    def needs(cmd: RemotingCommand) -> list[Need]:
        ext = cmd.ext or {}
        if is_retry(ext.get(topic_key)):  # a consumer sending back to its retry topic
            return [(group(ext.get(group_key)), SUB)]
        return [(topic(ext.get(topic_key)), PUB)]
    return needs


def _topic_and_group(actions: frozenset[Action], group_key: str = "consumerGroup"):
    def needs(cmd: RemotingCommand) -> list[Need]:
        ext = cmd.ext or {}
        out: list[Need] = []
        if not is_retry(ext.get("topic")):
            out.append((topic(ext.get("topic")), actions))
        out.append((group(ext.get(group_key)), actions))
        return out
    return needs


def _field(kind: Callable[[str | None], Resource], key: str, actions: frozenset[Action]):
    def needs(cmd: RemotingCommand) -> list[Need]:
        value = (cmd.ext or {}).get(key)
        if kind is topic and is_retry(value):
            return [(group(value), actions)]
        return [(kind(value), actions)]
    return needs


def _cluster(actions: frozenset[Action]):
    return lambda cmd: [(CLUSTER, actions)]


def _body(cmd: RemotingCommand) -> dict:
    try:
        data = fastjson.loads(cmd.body_bytes()) if cmd.body_len() else {}
    except (fastjson.JsonBodyError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _heartbeat(cmd: RemotingCommand) -> list[Need]:
    out: list[Need] = []
    for consumer in _body(cmd).get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            continue
        out.append((group(str(consumer.get("groupName") or "")), SUB))
        for sub in consumer.get("subscriptionDataSet") or []:
            if isinstance(sub, dict) and not is_retry(sub.get("topic")):
                out.append((topic(str(sub.get("topic") or "")), SUB))
    return out


def _body_group(key: str, actions: frozenset[Action]):
    def needs(cmd: RemotingCommand) -> list[Need]:
        return [(group(str(_body(cmd).get(key) or "")), actions)]
    return needs


def _end_transaction(cmd: RemotingCommand) -> list[Need]:
    ext = cmd.ext or {}
    if ext.get("topic"):
        return [(topic(ext["topic"]), PUB)]
    return [(group(ext.get("producerGroup")), PUB)]  # 4.x clients name no topic: the producer group stands in


RC = RequestCode
TABLE: dict[int, Callable[[RemotingCommand], list[Need]]] = {
    # clients
    RC.GET_ROUTEINFO_BY_TOPIC: _field(topic, "topic", PUB_SUB_GET),
    RC.SEND_MESSAGE: _send("topic", "producerGroup"),
    RC.SEND_MESSAGE_V2: _send("b", "a"),
    RC.SEND_BATCH_MESSAGE: _send("b", "a"),
    RC.END_TRANSACTION: _end_transaction,
    RC.CONSUMER_SEND_MSG_BACK: _field(group, "group", SUB),
    RC.PULL_MESSAGE: _topic_and_group(SUB),
    RC.QUERY_MESSAGE: _field(topic, "topic", SUB_GET),
    RC.VIEW_MESSAGE_BY_ID: lambda cmd: [(topic((cmd.ext or {}).get("topic")), SUB_GET)] if (cmd.ext or {}).get(
        "topic") else [(CLUSTER, GET)],
    RC.HEART_BEAT: _heartbeat,
    RC.UNREGISTER_CLIENT: lambda cmd: [(group((cmd.ext or {}).get("consumerGroup")), PUB_SUB)] if (
        cmd.ext or {}).get("consumerGroup") else [],
    RC.GET_CONSUMER_LIST_BY_GROUP: _field(group, "consumerGroup", SUB_GET),
    RC.QUERY_CONSUMER_OFFSET: _topic_and_group(SUB_GET),
    RC.UPDATE_CONSUMER_OFFSET: _topic_and_group(SUB_UPDATE),
    RC.SEARCH_OFFSET_BY_TIMESTAMP: _field(topic, "topic", SUB_GET),
    RC.GET_MAX_OFFSET: _field(topic, "topic", SUB_GET),
    RC.GET_MIN_OFFSET: _field(topic, "topic", SUB_GET),
    RC.GET_EARLIEST_MSG_STORETIME: _field(topic, "topic", SUB_GET),
    RC.LOCK_BATCH_MQ: _body_group("consumerGroup", SUB),
    RC.UNLOCK_BATCH_MQ: _body_group("consumerGroup", SUB),
    RC.CHECK_CLIENT_CONFIG: _field(group, "group", SUB),
    # topics and groups
    RC.UPDATE_AND_CREATE_TOPIC: _field(topic, "topic", CREATE_UPDATE),
    RC.DELETE_TOPIC_IN_BROKER: _field(topic, "topic", DELETE),
    RC.DELETE_TOPIC_IN_NAMESRV: _field(topic, "topic", DELETE),
    RC.GET_TOPIC_STATS_INFO: _field(topic, "topic", GET),
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _body_group("groupName", CREATE_UPDATE),
    RC.DELETE_SUBSCRIPTIONGROUP: _field(group, "groupName", DELETE),
    RC.GET_SUBSCRIPTIONGROUP_CONFIG: _field(group, "group", GET),
    RC.GET_CONSUMER_CONNECTION_LIST: _field(group, "consumerGroup", GET),
    RC.GET_PRODUCER_CONNECTION_LIST: _field(group, "producerGroup", GET),
    RC.GET_CONSUME_STATS: _field(group, "consumerGroup", GET),
    # the cluster
    RC.GET_BROKER_CLUSTER_INFO: _cluster(GET),
    RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _cluster(GET_LIST),
    RC.GET_TOPICS_BY_CLUSTER: _cluster(GET_LIST),
    RC.GET_ALL_TOPIC_CONFIG: _cluster(GET_LIST),
    RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _cluster(GET_LIST),
    RC.NOTIFY_METADATA_CHANGED: _cluster(GET_LIST),  # a slave reporting what its GET_ALL_* pulls gave it (pyrmq's)
    RC.GET_ALL_CONSUMER_OFFSET: _cluster(GET),
    RC.GET_ALL_DELAY_OFFSET: _cluster(GET),
    RC.GET_BROKER_CONFIG: _cluster(GET),
    RC.GET_BROKER_RUNTIME_INFO: _cluster(GET),
    RC.GET_BROKER_HA_STATUS: _cluster(GET),
    RC.QUERY_DATA_VERSION: _cluster(GET),
    RC.GET_KV_CONFIG: _cluster(GET),
    RC.GET_KVLIST_BY_NAMESPACE: _cluster(GET),
    RC.UPDATE_BROKER_CONFIG: _cluster(UPDATE),
    RC.PUT_KV_CONFIG: _cluster(UPDATE),
    RC.DELETE_KV_CONFIG: _cluster(DELETE),
    RC.WIPE_WRITE_PERM_OF_BROKER: _cluster(UPDATE),
    RC.ADD_WRITE_PERM_OF_BROKER: _cluster(UPDATE),
    RC.REGISTER_BROKER: _cluster(UPDATE),
    RC.UNREGISTER_BROKER: _cluster(UPDATE),
}


def needs(cmd: RemotingCommand) -> list[Need] | None:
    """What ``cmd`` needs granted, or None when its code is not in the table (Super users only)."""
    rule = TABLE.get(cmd.code)
    return None if rule is None else rule(cmd)
