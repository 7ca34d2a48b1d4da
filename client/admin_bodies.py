"""The admin answers' bodies (spec remoting.md §5.4-§5.8), read into small dataclasses. Pure: bytes in, no I/O.

Each parser takes the response body as RocketMQ writes it (fastjson: bare numeric keys, MessageQueue keys as inline
objects; ``remoting.fastjson.loads`` reads both and standard JSON) and returns objects whose attribute names are
the ones pyrmq's admin API always had (snake_case), so callers read ``status.commitlog_max_offset`` whatever the
wire spells. Missing fields take RocketMQ's defaults; a body of the wrong shape raises ``AdminBodyError`` naming
the request and what was expected.

    GET_ALL_TOPIC_CONFIG 21             {"dataVersion":DV,"topicConfigTable":{topic:TopicConfig}}
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201 {"dataVersion":DV,"subscriptionGroupTable":{group:SubscriptionGroupConfig}}
    GET_ALL_CONSUMER_OFFSET 43          {"dataVersion":DV,"offsetTable":{"topic@group":{queueId:offset}},
                                         "resetVersion":{key:ms}}
    GET_ALL_DELAY_OFFSET 45             {"dataVersion":DV,"offsetTable":{level:offset}}
    GET_BROKER_RUNTIME_INFO 28          {"table":{k:v}} (KVTable)
    GET_BROKER_CONFIG 26                Java properties text, "k=v" lines
    GET_TOPIC_STATS_INFO 202            {"offsetTable":{MQ:{"lastUpdateTimestamp","maxOffset","minOffset"}},
                                         "topicPutTps":D}
    GET_CONSUME_STATS 208               {"consumeTps":D,"offsetTable":{MQ:{"brokerOffset","consumerOffset","lastTimestamp",
                                        "pullOffset"}}} (pullOffset: RocketMQ 5's; absent from 4.x brokers)
    GET_CONSUMER_CONNECTION_LIST 203    {"connectionSet":[Connection],"consumeType","messageModel","consumeFromWhere",
                                         "subscriptionTable":{topic:SubscriptionData}}
    GET_BROKER_HA_STATUS 907            RocketMQ 5's HARuntimeInfo plus pyrmq's fields (``parse_ha_status``)

``resetVersion`` (43) is pyrmq's: the time of an explicit offset reset per ``topic@group``, so a slave's sync can
tell a deliberate rewind from a stale master (RocketMQ #1094); RocketMQ clients ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from client.errors import MQClientError
from common.perm import PERM_RW
from remoting import fastjson
from remoting.data_version import DataVersion
from remoting.headers import NumberError, parse_int
from remoting.subscription_group import SubscriptionGroupConfig
from remoting.topic_config import DEFAULT_QUEUE_NUMS, SINGLE_TAG, TopicConfig


class AdminBodyError(MQClientError):
    """An admin answer whose body does not have the shape of its request's answer."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(
            f"{what}: unexpected answer body ({detail})", hint="check that the server is a pyrmq or RocketMQ broker"
        )


def load_object(body: bytes, what: str) -> dict[str, Any]:
    """The body as a JSON object ({} when empty)."""
    if not body:
        return {}
    try:
        value = fastjson.loads(body)
    except (fastjson.JsonBodyError, UnicodeDecodeError) as exc:
        raise AdminBodyError(what, f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise AdminBodyError(what, f"a JSON {type(value).__name__}, not an object")
    return value


def _table(obj: dict[str, Any], key: str, what: str) -> dict:
    value = obj.get(key) or {}
    if not isinstance(value, dict):
        raise AdminBodyError(what, f"{key} is a {type(value).__name__}, not an object")
    return value


def _mq(key: Any, what: str) -> dict[str, Any]:
    """A MessageQueue map key: an inline object (fastjson) or, from a lenient writer, a JSON string of one."""
    if isinstance(key, fastjson.FrozenObject):
        return key.dict()
    if isinstance(key, str) and key.startswith("{"):
        return load_object(key.encode(), what)
    raise AdminBodyError(what, f"map key {key!r} is not a MessageQueue")


def _queue_entries(obj: dict[str, Any], what: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """A stats answer's ``offsetTable`` ({MessageQueue: {...}}) as (queue, entry) pairs; a null entry is {}."""
    return [(_mq(key, what), value or {}) for key, value in _table(obj, "offsetTable", what).items()]


def _int(value: Any) -> int:
    """A number field: a JSON integer or its ASCII decimal text (``remoting.headers.parse_int``)."""
    try:
        return parse_int(value)
    except NumberError as exc:
        raise AdminBodyError("admin answer", str(exc)) from None


# metadata ------------------------------------------------------------------------------------------------
def parse_data_version(obj: Any) -> DataVersion:
    obj = obj if isinstance(obj, dict) else {}
    return DataVersion(_int(obj.get("timestamp", 0)), _int(obj.get("counter", 0)), _int(obj.get("stateVersion", 0)))


@dataclass(slots=True)
class AllTopicConfig:
    data_version: DataVersion
    topic_configs: list[TopicConfig]


def parse_topic_config(name: str, obj: dict[str, Any]) -> TopicConfig:
    return TopicConfig(
        topic_name=str(obj.get("topicName") or name),
        read_queue_nums=_int(obj.get("readQueueNums", DEFAULT_QUEUE_NUMS)),
        write_queue_nums=_int(obj.get("writeQueueNums", DEFAULT_QUEUE_NUMS)),
        perm=_int(obj.get("perm", PERM_RW)),
        topic_sys_flag=_int(obj.get("topicSysFlag", 0)),
        order=bool(obj.get("order", False)),
        topic_filter_type=str(obj.get("topicFilterType") or SINGLE_TAG),
    )


def parse_all_topic_config(body: bytes) -> AllTopicConfig:
    what = "GET_ALL_TOPIC_CONFIG"
    obj = load_object(body, what)
    table = _table(obj, "topicConfigTable", what)
    configs = [parse_topic_config(str(name), cfg or {}) for name, cfg in table.items()]
    return AllTopicConfig(parse_data_version(obj.get("dataVersion")), sorted(configs, key=lambda c: c.topic_name))


@dataclass(slots=True)
class AllSubscriptionGroupConfig:
    data_version: DataVersion
    groups: list[SubscriptionGroupConfig]


def parse_subscription_group(name: str, obj: dict[str, Any]) -> SubscriptionGroupConfig:
    try:
        return SubscriptionGroupConfig.from_json(obj, name)
    except NumberError as exc:
        raise AdminBodyError("GET_ALL_SUBSCRIPTIONGROUP_CONFIG", str(exc)) from None


def parse_all_subscription_groups(body: bytes) -> AllSubscriptionGroupConfig:
    what = "GET_ALL_SUBSCRIPTIONGROUP_CONFIG"
    obj = load_object(body, what)
    table = _table(obj, "subscriptionGroupTable", what)
    groups = [parse_subscription_group(str(name), cfg or {}) for name, cfg in table.items()]
    return AllSubscriptionGroupConfig(
        parse_data_version(obj.get("dataVersion")), sorted(groups, key=lambda g: g.group_name)
    )


@dataclass(slots=True)
class QueueOffsets:
    offsets: dict[int, int]  # queueId -> committed offset
    reset_version: int = 0


@dataclass(slots=True)
class AllConsumerOffset:
    offset_table: dict[str, QueueOffsets]  # "topic@group" -> offsets

    def groups(self) -> set[str]:
        """Every group that committed an offset (the part after the last '@'; topics may not contain '@')."""
        return {key.rpartition("@")[2] for key in self.offset_table if "@" in key}


def parse_all_consumer_offsets(body: bytes) -> AllConsumerOffset:
    what = "GET_ALL_CONSUMER_OFFSET"
    obj = load_object(body, what)
    versions = _table(obj, "resetVersion", what)
    table = {}
    for key, queues in _table(obj, "offsetTable", what).items():
        offsets = {_int(q): _int(o) for q, o in (queues or {}).items()}
        table[str(key)] = QueueOffsets(offsets, _int(versions.get(key, 0)))
    return AllConsumerOffset(table)


def parse_all_delay_offsets(body: bytes) -> dict[int, int]:
    what = "GET_ALL_DELAY_OFFSET"
    return {_int(k): _int(v) for k, v in _table(load_object(body, what), "offsetTable", what).items()}


def parse_kv_table(body: bytes, what: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _table(load_object(body, what), "table", what).items()}


def parse_properties(body: bytes) -> dict[str, str]:
    """GET_BROKER_CONFIG's body: Java properties text, ``key=value`` per line (comments and blanks skipped)."""
    out: dict[str, str] = {}
    for line in body.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


# stats ---------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class QueueStat:
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(slots=True)
class TopicStats:
    broker_name: str
    queues: list[QueueStat]


def parse_topic_stats(body: bytes, topic: str) -> TopicStats:
    what = f"GET_TOPIC_STATS_INFO {topic}"
    broker_name = ""
    queues = []
    for mq, value in _queue_entries(load_object(body, what), what):
        broker_name = broker_name or str(mq.get("brokerName", ""))
        queues.append(
            QueueStat(
                _int(mq.get("queueId", 0)),
                _int(value.get("minOffset", 0)),
                _int(value.get("maxOffset", 0)),
                _int(value.get("lastUpdateTimestamp", 0)),
            )
        )
    return TopicStats(broker_name, sorted(queues, key=lambda q: q.queue_id))


@dataclass(slots=True)
class QueueConsumeStat:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int  # store time of the last consumed message; 0 if none
    pull_offset: int = -1  # RocketMQ 5's; pull_offset - consumer_offset = in flight (pop: received, not acked)

    @property
    def inflight(self) -> int:
        return max(0, self.pull_offset - self.consumer_offset) if self.pull_offset >= 0 else 0


@dataclass(slots=True)
class ConsumeStats:
    consume_tps: float
    queues: list[QueueConsumeStat]


def parse_consume_stats(body: bytes, group: str) -> ConsumeStats:
    what = f"GET_CONSUME_STATS {group}"
    obj = load_object(body, what)
    queues = []
    for mq, value in _queue_entries(obj, what):
        queues.append(
            QueueConsumeStat(
                str(mq.get("topic", "")),
                str(mq.get("brokerName", "")),
                _int(mq.get("queueId", 0)),
                _int(value.get("brokerOffset", 0)),
                _int(value.get("consumerOffset", 0)),
                _int(value.get("lastTimestamp", 0)),
                _int(value.get("pullOffset", -1)),
            )
        )
    queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
    return ConsumeStats(float(obj.get("consumeTps", 0.0)), queues)


# connections ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Connection:
    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(slots=True)
class ConsumerConnection:
    connections: list[Connection]
    subscriptions: dict[str, str]  # topic -> subscription expression
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""


def parse_consumer_connection(body: bytes, group: str) -> ConsumerConnection:
    what = f"GET_CONSUMER_CONNECTION_LIST {group}"
    obj = load_object(body, what)
    conns = [
        Connection(
            str(c.get("clientId", "")),
            str(c.get("clientAddr", "")),
            str(c.get("language", "")),
            _int(c.get("version", 0)),
        )
        for c in obj.get("connectionSet") or []
        if isinstance(c, dict)
    ]
    subs = {
        str(topic): str((data or {}).get("subString", "*"))
        for topic, data in _table(obj, "subscriptionTable", what).items()
    }
    return ConsumerConnection(
        sorted(conns, key=lambda c: c.client_id),
        dict(sorted(subs.items())),
        str(obj.get("consumeType") or ""),
        str(obj.get("messageModel") or ""),
        str(obj.get("consumeFromWhere") or ""),
    )


# HA ------------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class SlaveConnection:
    slave_addr: str  # the slave's broker address (pyrmq); a RocketMQ broker or an older pyrmq slave: its HA peer
    broker_id: int
    ack_offset: int
    lag_bytes: int
    state: str  # OK / FALL_BEHIND / STALE / DISCONNECTED
    transfer_from: int
    transferred_bytes: int = 0
    last_ack_timestamp: int = 0
    peer_addr: str = ""  # the HA socket's peer ("" from a RocketMQ broker)
    last_read_timestamp: int = 0
    since_last_read_ms: int = -1  # -1: unknown or no report yet


@dataclass(slots=True)
class HAStatus:
    role: str
    commitlog_max_offset: int
    commitlog_min_offset: int = 0
    slaves: list[SlaveConnection] = field(default_factory=list)  # on a master
    in_sync_slave_count: int = 0
    # on a slave
    master_ha_addr: str = ""
    connected: bool = False
    link_state: str = "DISCONNECTED"  # OK / STALE / DISCONNECTED: the slave's link to its master
    since_last_read_ms: int = -1  # -1: not connected, or not reported (a RocketMQ broker)
    last_read_timestamp: int = 0
    last_write_timestamp: int = 0
    replicated_bytes: int = 0
    master_flush_offset: int = 0
    stale_after_ms: int = 0  # the silence after which a connected link shows STALE (0: not reported)


def parse_ha_status(body: bytes) -> HAStatus:
    """GET_BROKER_HA_STATUS (907): RocketMQ 5's HARuntimeInfo (``master``, ``masterCommitLogMaxOffset``,
    ``inSyncSlaveNums``, ``haConnectionInfo`` [{``addr``, ``slaveAckOffset``, ``diff``, ``inSync``,
    ``transferFromWhere``, ``transferredByteInSecond``}], ``haClientRuntimeInfo`` {``masterAddr``, ``maxOffset``,
    ``lastReadTimestamp``, ``lastWriteTimestamp``, ``masterFlushOffset``, ``isActivated``}) plus pyrmq's ``role``,
    ``commitLogMaxOffset``, ``commitLogMinOffset``, ``staleAfterMs``, per connection ``brokerId``, ``state``,
    ``haPeerAddr``, ``transferredBytes``, ``lastAckTimestamp``, ``lastReadTimestamp``, ``sinceLastReadMs``, and the
    client's ``replicatedBytes``, ``state``, ``sinceLastReadMs`` (broker/ha/status.py writes them). A RocketMQ 5
    broker's answer, without pyrmq's fields, reads too: the role from ``master``, states from ``inSync`` and
    ``isActivated`` (``activated``: what pyrmq brokers before issue 22 wrote)."""
    what = "GET_BROKER_HA_STATUS"
    obj = load_object(body, what)
    client = obj.get("haClientRuntimeInfo") or {}
    if not isinstance(client, dict):
        raise AdminBodyError(what, "haClientRuntimeInfo is not an object")
    is_master = bool(obj.get("master", False))
    role = str(obj.get("role") or ("MASTER" if is_master else "SLAVE"))
    master_max = _int(obj.get("masterCommitLogMaxOffset", 0))
    max_offset = _int(obj.get("commitLogMaxOffset", master_max if is_master else client.get("maxOffset", 0)))
    slaves = []
    for c in obj.get("haConnectionInfo") or []:
        if not isinstance(c, dict):
            raise AdminBodyError(what, "haConnectionInfo holds something other than objects")
        ack = _int(c.get("slaveAckOffset", 0))
        slaves.append(
            SlaveConnection(
                slave_addr=str(c.get("addr", "")),
                broker_id=_int(c.get("brokerId", 0)),
                ack_offset=ack,
                lag_bytes=_int(c.get("diff", max(0, max_offset - max(ack, 0)))),
                state=str(c.get("state") or ("OK" if c.get("inSync") else "FALL_BEHIND")),
                transfer_from=_int(c.get("transferFromWhere", 0)),
                transferred_bytes=_int(c.get("transferredBytes", 0)),
                last_ack_timestamp=_int(c.get("lastAckTimestamp", 0)),
                peer_addr=str(c.get("haPeerAddr") or ""),
                last_read_timestamp=_int(c.get("lastReadTimestamp", 0)),
                since_last_read_ms=_int(c.get("sinceLastReadMs", -1)),
            )
        )
    connected = bool(client.get("isActivated", client.get("activated", False)))
    return HAStatus(
        role=role,
        commitlog_max_offset=max_offset,
        commitlog_min_offset=_int(obj.get("commitLogMinOffset", 0)),
        slaves=slaves,
        in_sync_slave_count=_int(obj.get("inSyncSlaveNums", sum(s.state == "OK" for s in slaves))),
        master_ha_addr=str(client.get("masterAddr") or ""),
        connected=connected,
        link_state=str(client.get("state") or ("OK" if connected else "DISCONNECTED")),
        since_last_read_ms=_int(client.get("sinceLastReadMs", -1)),
        last_read_timestamp=_int(client.get("lastReadTimestamp", 0)),
        last_write_timestamp=_int(client.get("lastWriteTimestamp", 0)),
        replicated_bytes=_int(client.get("replicatedBytes", 0)),
        master_flush_offset=_int(client.get("masterFlushOffset", 0)),
        stale_after_ms=_int(obj.get("staleAfterMs", 0)),
    )
