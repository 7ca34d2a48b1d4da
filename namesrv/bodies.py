"""The nameserver's JSON bodies as RocketMQ writes and reads them (spec remoting.md §5.3-§5.5). Pure: bytes in, bytes
out, no sockets, no clocks.

Written by the nameserver::

    TopicRouteData  {"brokerDatas":[BrokerData],"filterServerTable":{},"orderTopicConf":S (only when set),
                     "queueDatas":[{"brokerName":S,"perm":I,"readQueueNums":I,"topicSysFlag":I,"writeQueueNums":I}]}
    BrokerData      {"brokerAddrs":{<brokerId>:"host:port"},"brokerName":S,"cluster":S,"enableActingMaster":false}
    ClusterInfo     {"brokerAddrTable":{<brokerName>:BrokerData},"brokerLiveTable":{<brokerAddr>:BrokerLive},
                     "clusterAddrTable":{<cluster>:[<brokerName>...]}}
    BrokerLive      {"dataVersion":DataVersion,"haServerAddr":S,"heartbeatTimeoutMillis":L,"lastUpdateTimestamp":L}
    DataVersion     {"counter":L,"stateVersion":L,"timestamp":L}
    TopicList       {"topicList":[S...]}
    KVTable         {"table":{S:S}}

Fields are in fastjson's alphabetical order. ``brokerLiveTable`` is pyrmq's: RocketMQ's ClusterInfo has no live
entries, but a restarting master finds its slaves' group-internal address (the host of their HA address) there;
RocketMQ clients ignore the unknown field. ``stateVersion`` and ``enableActingMaster`` are RocketMQ 5's, required
by strict clients (rocketmq-rust) and ignored by 4.x ones.

Numeric map keys (``brokerAddrs``): fastjson writes them bare (``{0:"10.0.0.1:10911"}``), which is not JSON. A
Java namesrv keeps that form for callers older than V4_9_4 (version ordinal 401) that did not ask for
``acceptStandardJsonOnly``, and quotes them for everyone else. We do the same (``standard_json``): the Go client
(version 317) splits ``brokerAddrs`` on ``:`` and reads the id before it, so a quoted ``"1"`` would become id 0
for it; the C++ client inside PyPI ``rocketmq`` (version 63) reads the bare form; Java >= 4.9.4 and Rust get
standard JSON.

Read by the nameserver: RegisterBrokerBody (``decode_register_body``), in its JSON form or, with
``compressed=true`` (a Java broker with ``compressedRegister``), as one zlib stream of int32-length-prefixed parts::

    i32 n, n bytes     DataVersion JSON
    i32 count          topics
    count times:       i32 n, n bytes: "topicName readQueueNums writeQueueNums perm topicFilterType[ attributesJSON]"
    i32 n, n bytes     filterServerList JSON array

(the compressed form carries no topicSysFlag and no order flag: RocketMQ reads their defaults, 0 and false).
Anything else raises ``BodyError`` whose text says what was expected; the processor answers it with code 1.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from common.errors import PyrmqError
from namesrv.route_table import BrokerData, LiveBroker, TopicRouteData
from remoting import fastjson
from remoting.data_version import DataVersion
from remoting.headers import NumberError, parse_int
from remoting.topic_config import TopicConfig

STANDARD_JSON_VERSION = 401  # MQVersion.V4_9_4: from here on a Java namesrv quotes numeric keys in routes
REGISTER_BODY_VERSION = 37  # MQVersion.V3_0_11: older brokers send a bare TopicConfigSerializeWrapper
MAX_INFLATED = 64 * 1024 * 1024  # a compressed registration may not inflate past this (a zip bomb is not a broker)
INT_MAX = 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
_I32 = struct.Struct(">i")
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class BodyError(PyrmqError):
    """A request body that does not have the shape the request needs; the text says what was expected."""


def standard_json(version: int, accept_standard_json_only: bool) -> bool:
    """Whether a caller gets quoted numeric keys (see the module docstring)."""
    return accept_standard_json_only or version >= STANDARD_JSON_VERSION


def dumps(value: Any, *, standard: bool = True) -> bytes:
    """Compact JSON; with ``standard=False`` int map keys are written bare, as fastjson does."""
    if standard:
        return fastjson.dumps(value)
    return _dump_bare(value).encode()


def _dump_bare(value: Any) -> str:
    if isinstance(value, dict):
        items = (
            f"{k if isinstance(k, int) and not isinstance(k, bool) else _encode(str(k))}:{_dump_bare(v)}"
            for k, v in value.items()
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dump_bare(v) for v in value) + "]"
    return _encode(value)


# written by the nameserver ----------------------------------------------------------------------------------
def data_version_json(dv: DataVersion) -> dict[str, int]:
    return {"counter": dv.counter, "stateVersion": dv.state_version, "timestamp": dv.timestamp}


def broker_data_json(bd: BrokerData) -> dict[str, Any]:
    return {
        "brokerAddrs": {bid: bd.broker_addrs[bid] for bid in sorted(bd.broker_addrs)},
        "brokerName": bd.broker_name,
        "cluster": bd.cluster,
        "enableActingMaster": False,
    }


def route_json(route: TopicRouteData, order_topic_conf: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "brokerDatas": [broker_data_json(bd) for bd in route.broker_datas],
        "filterServerTable": {},
    }
    if order_topic_conf:
        out["orderTopicConf"] = order_topic_conf
    out["queueDatas"] = [
        {
            "brokerName": q.broker_name,
            "perm": q.perm,
            "readQueueNums": q.read_queue_nums,
            "topicSysFlag": q.topic_sys_flag,
            "writeQueueNums": q.write_queue_nums,
        }
        for q in route.queue_datas
    ]
    return out


def cluster_info_json(
    broker_addr_table: dict[str, BrokerData],
    cluster_addr_table: dict[str, set[str]],
    live: Iterable[LiveBroker],
    wall_offset_ms: int,
) -> dict[str, Any]:
    """ClusterInfo; ``wall_offset_ms`` turns the table's monotonic times into epoch ms (RocketMQ's unit)."""
    return {
        "brokerAddrTable": {name: broker_data_json(broker_addr_table[name]) for name in sorted(broker_addr_table)},
        "brokerLiveTable": {
            b.broker_addr: {
                "dataVersion": data_version_json(b.info.data_version),
                "haServerAddr": b.info.ha_server_addr,
                "heartbeatTimeoutMillis": b.info.timeout_ms,
                "lastUpdateTimestamp": b.info.last_update_ms + wall_offset_ms,
            }
            for b in sorted(live, key=lambda b: b.broker_addr)
        },
        "clusterAddrTable": {c: sorted(cluster_addr_table[c]) for c in sorted(cluster_addr_table)},
    }


def topic_list(topics: Iterable[str]) -> bytes:
    return fastjson.dumps({"topicList": list(topics)})


def kv_table(table: dict[str, str]) -> bytes:
    return fastjson.dumps({"table": {k: table[k] for k in sorted(table)}})


# read by the nameserver --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RegisterBody:
    data_version: DataVersion
    topic_configs: list[TopicConfig]
    filter_server_list: list[str]


EMPTY_REGISTER_BODY = RegisterBody(DataVersion(), [], [])

_REGISTER_SHAPE = (
    'a RegisterBrokerBody: {"topicConfigSerializeWrapper":{"dataVersion":{"counter":N,"timestamp":N},'
    '"topicConfigTable":{"<topic>":TopicConfig}},"filterServerList":[]}'
)


def decode_register_body(body: bytes, *, compressed: bool, version: int = REGISTER_BODY_VERSION) -> RegisterBody:
    """The body of REGISTER_BROKER (empty: no topics and DataVersion 0/0, as RocketMQ reads a missing body)."""
    if not body:
        return EMPTY_REGISTER_BODY
    if compressed:
        return _decode_compressed(body)
    obj = _json_object(body, _REGISTER_SHAPE)
    if version < REGISTER_BODY_VERSION:  # a broker older than 3.0.11 sends the wrapper alone
        return _wrapper(obj, filter_servers=[])
    wrapper = obj.get("topicConfigSerializeWrapper", {})
    if not isinstance(wrapper, dict):
        raise BodyError(f"topicConfigSerializeWrapper is {_kind(wrapper)}; expected {_REGISTER_SHAPE}")
    return _wrapper(wrapper, filter_servers=_string_list(obj.get("filterServerList", []), "filterServerList"))


def decode_data_version(body: bytes, what: str) -> DataVersion:
    """A DataVersion body (QUERY_DATA_VERSION)."""
    return _data_version(_json_object(body, f'{what}: a DataVersion {{"counter":N,"timestamp":N}}'), what)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(type(value), repr(value))


def _json_object(body: bytes, expected: str) -> dict:
    try:
        obj = fastjson.loads(body)
    except (fastjson.JsonBodyError, UnicodeDecodeError, RecursionError) as exc:
        raise BodyError(f"the body is not JSON ({exc}); expected {expected}") from None
    if not isinstance(obj, dict):
        raise BodyError(f"the body is {_kind(obj)}; expected {expected}")
    return obj


def _long(obj: dict, name: str, default: int, what: str, lo: int = LONG_MIN, hi: int = LONG_MAX) -> int:
    value = obj.get(name, default)
    if value is None:
        return default
    if type(value) is not int or not lo <= value <= hi:
        raise BodyError(f"{what}: {name}={value!r} is not an integer in {lo}..{hi}")
    return value


def _data_version(obj: Any, what: str) -> DataVersion:
    if not isinstance(obj, dict):
        raise BodyError(f'{what} is {_kind(obj)}; expected {{"counter":N,"timestamp":N}}')
    return DataVersion(
        timestamp=_long(obj, "timestamp", 0, what),
        counter=_long(obj, "counter", 0, what),
        state_version=_long(obj, "stateVersion", 0, what),
    )


def _string_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BodyError(f"{what} is {_kind(value)}; expected an array of strings")
    return value


def _wrapper(wrapper: dict, *, filter_servers: list[str]) -> RegisterBody:
    dv = _data_version(wrapper.get("dataVersion", {}), "topicConfigSerializeWrapper.dataVersion")
    table = wrapper.get("topicConfigTable", {})
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise BodyError(f"topicConfigTable is {_kind(table)}; expected an object of topic name -> TopicConfig")
    return RegisterBody(dv, [_topic_config(key, value) for key, value in table.items()], filter_servers)


def _topic_config(key: Any, value: Any) -> TopicConfig:
    what = f"topicConfigTable[{key!r}]"
    if not isinstance(value, dict):
        raise BodyError(
            f"{what} is {_kind(value)}; expected a TopicConfig "
            '{"topicName":S,"readQueueNums":N,"writeQueueNums":N,"perm":N,"topicSysFlag":N,"order":B}'
        )
    name = value.get("topicName", key)
    if not isinstance(name, str) or not name:
        raise BodyError(f"{what}: topicName {name!r} is not a topic name")
    order = value.get("order", False)
    if not isinstance(order, bool):
        raise BodyError(f"{what}: order={order!r} is not true/false")
    return TopicConfig(
        name,
        read_queue_nums=_long(value, "readQueueNums", 16, what, 0, INT_MAX),
        write_queue_nums=_long(value, "writeQueueNums", 16, what, 0, INT_MAX),
        perm=_long(value, "perm", 6, what, 0, 7),
        topic_sys_flag=_long(value, "topicSysFlag", 0, what, 0, INT_MAX),
        order=order,
    )


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def part(self, what: str) -> bytes:
        if self.pos + 4 > len(self.data):
            raise BodyError(f"compressed registration body ends before the length of {what}")
        (n,) = _I32.unpack_from(self.data, self.pos)
        if n < 0 or self.pos + 4 + n > len(self.data):
            raise BodyError(f"compressed registration body: {what} claims {n} bytes, {len(self.data) - self.pos - 4} left")
        self.pos += 4 + n
        return self.data[self.pos - n : self.pos]

    def count(self, what: str) -> int:
        if self.pos + 4 > len(self.data):
            raise BodyError(f"compressed registration body ends before {what}")
        (n,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        if n < 0:
            raise BodyError(f"compressed registration body: {what} is {n}")
        return n


def _inflate(body: bytes) -> bytes:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_INFLATED)
    except zlib.error as exc:
        raise BodyError(f"compressed=true but the body is not a zlib stream ({exc}); send compressed=false with "
                        "the JSON RegisterBrokerBody, or the deflated form of spec §5.5") from None
    if inflater.unconsumed_tail:
        raise BodyError(f"the compressed registration body inflates past {MAX_INFLATED} bytes")
    if not inflater.eof:
        raise BodyError("the compressed registration body is a truncated zlib stream")
    return data


def _decode_compressed(body: bytes) -> RegisterBody:
    reader = _Reader(_inflate(body))
    dv_json = reader.part("the DataVersion")
    dv = _data_version(_json_object(dv_json, 'a DataVersion {"counter":N,"timestamp":N}'), "dataVersion")
    topics = []
    for i in range(reader.count("the topic count")):
        line = reader.part(f"topic config #{i}").decode("utf-8", "replace")
        topics.append(_topic_line(line, i))
    filter_json = reader.part("the filterServerList")
    try:
        filter_servers = _string_list(fastjson.loads(filter_json), "filterServerList")
    except fastjson.JsonBodyError as exc:
        raise BodyError(f"filterServerList is not JSON ({exc})") from None
    if reader.pos != len(reader.data):
        raise BodyError(f"the compressed registration body has {len(reader.data) - reader.pos} bytes after its end")
    return RegisterBody(dv, topics, filter_servers)


def _topic_line(line: str, i: int) -> TopicConfig:
    fields = line.split(" ")
    shape = "'topicName readQueueNums writeQueueNums perm topicFilterType[ attributes]'"
    if len(fields) < 5:
        raise BodyError(f"topic config #{i} {line[:80]!r} has {len(fields)} fields; expected {shape}")
    name, read, write, perm, filter_type = fields[:5]
    if not name:
        raise BodyError(f"topic config #{i} {line[:80]!r} has an empty topic name")
    numbers = []
    for label, text, hi in (("readQueueNums", read, INT_MAX), ("writeQueueNums", write, INT_MAX), ("perm", perm, 7)):
        try:
            numbers.append(parse_int(text, 0, hi, what=label))
        except NumberError:
            raise BodyError(f"topic config #{i} ({name}): {label}={text[:20]!r} is not an integer in 0..{hi}") from None
    if filter_type not in TOPIC_FILTER_TYPES:
        raise BodyError(f"topic config #{i} ({name}): topicFilterType {filter_type[:20]!r} is not SINGLE_TAG/MULTI_TAG")
    return TopicConfig(name, numbers[0], numbers[1], numbers[2])


def encode_register_body_compressed(
    data_version: DataVersion, topics: Iterable[TopicConfig], filter_servers: Iterable[str] = ()
) -> bytes:
    """The deflated RegisterBrokerBody a Java broker with ``compressedRegister=true`` sends (for tests and peers)."""
    topics = list(topics)
    parts = [fastjson.dumps(data_version_json(data_version)), _I32.pack(len(topics))]
    out = bytearray(_I32.pack(len(parts[0])) + parts[0] + parts[1])
    for tc in topics:
        line = f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} SINGLE_TAG".encode()
        out += _I32.pack(len(line)) + line
    tail = fastjson.dumps(list(filter_servers))
    out += _I32.pack(len(tail)) + tail
    return zlib.compress(bytes(out), 9)


def body_crc32(body: bytes) -> int:
    """RocketMQ's ``UtilAll.crc32``: CRC-32 of the body, top bit cleared (what ``bodyCrc32`` carries)."""
    return zlib.crc32(body) & 0x7FFFFFFF
