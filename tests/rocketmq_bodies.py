"""A strict reader of the admin answers' JSON bodies, built from RocketMQ's field lists (issue 22 item 10).

RocketMQ's admin clients decode these bodies strictly: rocketmq-rust's DefaultMQAdminExt (serde, every field
required, u64 where Java has a long that cannot be negative) and mqadmin (fastjson into RocketMQ's Java classes).
Each schema below lists every field RocketMQ 5's class serialises (fastjson: one per getter, nulls omitted), under
RocketMQ's name, with its JSON type; a field marked ``?`` is one Java leaves out when null. Sources (field names
only): ``remoting/.../protocol/{admin,body,subscription,heartbeat,route}/*.java`` of apache/rocketmq 5.x and
``rocketmq-remoting/src/protocol/{admin,body}/*.rs`` of mxsm/rocketmq-rust.

``read(body, schema, extras)`` parses with ``remoting.fastjson`` (bare numeric keys, inline MessageQueue keys) and
raises ``BodyMismatch`` naming the path of the first field that is missing, of the wrong type, or unknown. Unknown
fields are allowed only where ``extras`` lists them: pyrmq's own, documented fields (``PYRMQ_EXTRAS``), which
fastjson and serde skip.

Types: ``S`` string, ``I``/``L`` integer (Java int/long), ``U`` a long rocketmq-rust reads as u64 (not negative),
``B`` boolean, ``D`` a double (a JSON number with a fraction part, as fastjson writes a double), ``ANY`` anything;
``Enum(...)`` a string among names; ``ListOf(x)``; ``MapOf(key, value)`` with key ``S``, ``I`` (a number, quoted
or bare) or ``MQ`` (an inline MessageQueue object); a dict is an object schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remoting import fastjson


class BodyMismatch(AssertionError):
    pass


@dataclass(frozen=True)
class Enum:
    names: frozenset[str]


@dataclass(frozen=True)
class ListOf:
    item: Any


@dataclass(frozen=True)
class MapOf:
    key: str
    value: Any


LANGUAGES = Enum(frozenset({"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO",
                            "PHP", "OMS", "RUST", "NODE_JS"}))

DATA_VERSION = {"counter": "L", "stateVersion": "L", "timestamp": "L"}
MESSAGE_QUEUE = {"brokerName": "S", "queueId": "I", "topic": "S"}
TOPIC_CONFIG = {
    "attributes": MapOf("S", "S"),
    "order": "B",
    "perm": "I",
    "readQueueNums": "I",
    "topicFilterType": Enum(frozenset({"SINGLE_TAG", "MULTI_TAG"})),
    "topicName": "S",
    "topicSysFlag": "I",
    "writeQueueNums": "I",
}
TOPIC_CONFIG_SERIALIZE_WRAPPER = {"dataVersion": DATA_VERSION, "topicConfigTable": MapOf("S", TOPIC_CONFIG)}
GROUP_RETRY_POLICY = {
    "type": Enum(frozenset({"CUSTOMIZED", "EXPONENTIAL"})),
    "customizedRetryPolicy?": "ANY",
    "exponentialRetryPolicy?": "ANY",
}
SUBSCRIPTION_GROUP_CONFIG = {
    "attributes": MapOf("S", "S"),
    "brokerId": "L",
    "consumeBroadcastEnable": "B",
    "consumeEnable": "B",
    "consumeFromMinEnable": "B",
    "consumeMessageOrderly": "B",
    "consumeTimeoutMinute": "I",
    "groupName": "S",
    "groupRetryPolicy": GROUP_RETRY_POLICY,
    "groupSysFlag": "I",
    "notifyConsumerIdsChangedEnable": "B",
    "retryMaxTimes": "I",
    "retryQueueNums": "I",
    "subscriptionDataSet?": "ANY",
    "whichBrokerWhenConsumeSlowly": "L",
}
SUBSCRIPTION_GROUP_WRAPPER = {
    "dataVersion": DATA_VERSION,
    "subscriptionGroupTable": MapOf("S", SUBSCRIPTION_GROUP_CONFIG),
}
CONSUMER_OFFSET_SERIALIZE_WRAPPER = {"dataVersion": DATA_VERSION, "offsetTable": MapOf("S", MapOf("I", "L"))}
DELAY_OFFSET_SERIALIZE_WRAPPER = {"dataVersion": DATA_VERSION, "offsetTable": MapOf("I", "L")}
KV_TABLE = {"table": MapOf("S", "S")}
TOPIC_OFFSET = {"lastUpdateTimestamp": "L", "maxOffset": "L", "minOffset": "L"}
TOPIC_STATS_TABLE = {"offsetTable": MapOf("MQ", TOPIC_OFFSET), "topicPutTps": "D"}
OFFSET_WRAPPER = {"brokerOffset": "L", "consumerOffset": "L", "lastTimestamp": "L", "pullOffset": "L"}
CONSUME_STATS = {"consumeTps": "D", "offsetTable": MapOf("MQ", OFFSET_WRAPPER)}
CONNECTION = {"clientAddr": "S", "clientId": "S", "language": LANGUAGES, "version": "I"}
SUBSCRIPTION_DATA = {
    "classFilterMode": "B",
    "codeSet": ListOf("I"),
    "expressionType": "S",
    "subString": "S",
    "subVersion": "L",
    "tagsSet": ListOf("S"),
    "topic": "S",
}
CONSUMER_CONNECTION = {
    "connectionSet": ListOf(CONNECTION),
    "consumeFromWhere": Enum(frozenset({
        "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP",
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST", "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET",
    })),
    "consumeType": Enum(frozenset({"CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP"})),
    "messageModel": Enum(frozenset({"BROADCASTING", "CLUSTERING"})),
    "subscriptionTable": MapOf("S", SUBSCRIPTION_DATA),
}
PRODUCER_CONNECTION = {"connectionSet": ListOf(CONNECTION)}
HA_CONNECTION_RUNTIME_INFO = {
    "addr": "S",
    "diff": "L",
    "inSync": "B",
    "slaveAckOffset": "U",
    "transferFromWhere": "U",
    "transferredByteInSecond": "U",
}
HA_CLIENT_RUNTIME_INFO = {
    "isActivated": "B",
    "lastReadTimestamp": "U",
    "lastWriteTimestamp": "U",
    "masterAddr": "S",
    "masterFlushOffset": "U",
    "maxOffset": "U",
    "transferredByteInSecond": "U",
}
HA_RUNTIME_INFO = {
    "haClientRuntimeInfo": HA_CLIENT_RUNTIME_INFO,
    "haConnectionInfo": ListOf(HA_CONNECTION_RUNTIME_INFO),
    "inSyncSlaveNums": "I",
    "master": "B",
    "masterCommitLogMaxOffset": "U",
}
CONSUMER_LIST = {"consumerIdList": ListOf("S")}
LOCK_BATCH_RESPONSE = {"lockOKMQSet": ListOf(MESSAGE_QUEUE)}
BROKER_DATA = {
    "brokerAddrs": MapOf("I", "S"),
    "brokerName": "S",
    "cluster": "S",
    "enableActingMaster": "B",
    "zoneName?": "S",
}
CLUSTER_INFO = {"brokerAddrTable": MapOf("S", BROKER_DATA), "clusterAddrTable": MapOf("S", ListOf("S"))}
TOPIC_LIST = {"brokerAddr?": "S", "topicList": ListOf("S")}

# pyrmq's own fields, documented where they are written; RocketMQ's readers skip them.
PYRMQ_EXTRAS: dict[str, frozenset[str]] = {
    # broker/ha/status.py
    "HARuntimeInfo": frozenset({"role", "commitLogMaxOffset", "commitLogMinOffset", "staleAfterMs"}),
    "HARuntimeInfo.haConnectionInfo[]": frozenset({
        "brokerId", "haPeerAddr", "lastAckTimestamp", "lastReadTimestamp", "sinceLastReadMs", "state",
        "transferredBytes",
    }),
    "HARuntimeInfo.haClientRuntimeInfo": frozenset({"replicatedBytes", "sinceLastReadMs", "state"}),
    # broker/processors/slave_sync_serve.py (GET_ALL_CONSUMER_OFFSET's resetVersion, RocketMQ #1094)
    "ConsumerOffsetSerializeWrapper": frozenset({"resetVersion"}),
    # namesrv/bodies.py (each broker's liveness and HA address, read by broker/slave_sync.py)
    "ClusterInfo": frozenset({"brokerLiveTable"}),
}


def read(body: bytes, schema: dict[str, Any], name: str, extras: dict[str, frozenset[str]] | None = None) -> Any:
    """The body parsed and checked against ``schema``; ``name`` roots the paths in errors and in ``extras``."""
    try:
        value = fastjson.loads(body)
    except fastjson.JsonBodyError as exc:
        raise BodyMismatch(f"{name}: not JSON: {exc}") from None
    _check(value, schema, name, name, extras or {})
    return value


def _check(value: Any, schema: Any, path: str, extras_key: str, extras: dict[str, frozenset[str]]) -> None:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise BodyMismatch(f"{path}: expected an object, got {value!r}")
        known = set()
        for field, sub in schema.items():
            optional = field.endswith("?")
            field = field.rstrip("?")
            known.add(field)
            if field not in value or value[field] is None:
                if optional:
                    continue
                raise BodyMismatch(f"{path}.{field}: missing (RocketMQ's readers need it)")
            _check(value[field], sub, f"{path}.{field}", f"{extras_key}.{field}", extras)
        unknown = set(map(str, value)) - known - extras.get(extras_key, frozenset())
        if unknown:
            raise BodyMismatch(f"{path}: fields RocketMQ does not have and pyrmq does not document: {sorted(unknown)}")
    elif isinstance(schema, ListOf):
        if not isinstance(value, list):
            raise BodyMismatch(f"{path}: expected a list, got {value!r}")
        for i, item in enumerate(value):
            _check(item, schema.item, f"{path}[{i}]", f"{extras_key}[]", extras)
    elif isinstance(schema, MapOf):
        if not isinstance(value, dict):
            raise BodyMismatch(f"{path}: expected a map, got {value!r}")
        for key, item in value.items():
            _check_key(key, schema.key, path)
            _check(item, schema.value, f"{path}[{key}]", f"{extras_key}{{}}", extras)
    elif isinstance(schema, Enum):
        if value not in schema.names:
            raise BodyMismatch(f"{path}: {value!r} is not one of RocketMQ's names {sorted(schema.names)}")
    elif schema == "ANY":
        return
    elif schema == "S":
        if not isinstance(value, str):
            raise BodyMismatch(f"{path}: expected a string, got {value!r}")
    elif schema == "B":
        if not isinstance(value, bool):
            raise BodyMismatch(f"{path}: expected true/false, got {value!r}")
    elif schema in ("I", "L", "U"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BodyMismatch(f"{path}: expected an integer, got {value!r}")
        if schema == "U" and value < 0:
            raise BodyMismatch(f"{path}: {value} is negative; rocketmq-rust reads it as u64")
    elif schema == "D":
        if not isinstance(value, float):
            raise BodyMismatch(f"{path}: expected a double (a number with a fraction part), got {value!r}")
    else:
        raise AssertionError(f"unknown schema {schema!r}")


def _check_key(key: Any, kind: str, path: str) -> None:
    if kind == "MQ":
        if not isinstance(key, fastjson.FrozenObject):
            raise BodyMismatch(f"{path}: key {key!r} is not an inline MessageQueue object")
        _check(key.dict(), MESSAGE_QUEUE, f"{path}{{key}}", "", {})
    elif kind == "I":
        if not (isinstance(key, int) or (isinstance(key, str) and key.lstrip("-").isascii()
                                          and key.lstrip("-").isdigit())):
            raise BodyMismatch(f"{path}: key {key!r} is not a number")
    elif not isinstance(key, str):
        raise BodyMismatch(f"{path}: key {key!r} is not a string")
