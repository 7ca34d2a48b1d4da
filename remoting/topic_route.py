"""RocketMQ's TopicRouteData, GET_ROUTEINFO_BY_TOPIC's body (spec remoting.md §5.3): the one reader every caller
uses (the SDK's route cache and AdminClient, mqctl through it, the Spark connector, the broker's v2 route).

The nameserver writes it (``namesrv/bodies.py route_json``)::

    {"brokerDatas":[{"brokerAddrs":{<brokerId>:"host:port"},"brokerName":S,"cluster":S,...}],
     "filterServerTable":{}, "orderTopicConf":S (only when set),
     "queueDatas":[{"brokerName":S,"perm":I,"readQueueNums":I,"topicSysFlag":I,"writeQueueNums":I}]}

A route can come from any nameserver a client is pointed at, so the reader is strict and bounded, like the other
readers here: the body is an object; ``queueDatas`` / ``brokerDatas`` are arrays (absent or null: empty) of at
most ``MAX_ENTRIES`` objects; ``brokerName`` is a non-empty string; numbers are strict integers
(``remoting.headers.parse_int``: no Unicode digits, no fractions) within their ranges, a missing one is 0;
``brokerAddrs`` keys are broker ids (bare as fastjson writes them, or quoted) and its values ``host:port``; the
queues of all groups together are at most ``MAX_ROUTE_QUEUES``, so a route never expands into more queue objects
than that. Anything else is a ``RouteDataError`` naming the field. Unknown fields are ignored (RocketMQ 5 adds
some). Pure: bytes or parsed JSON in, frozen dataclasses out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remoting import fastjson
from remoting.headers import INT_MAX, LONG_MAX, NumberError, parse_host_port, parse_int

MAX_QUEUE_NUMS = 65535  # per QueueData, read and write alike (a queueId is a Java int; routes hold far fewer)
MAX_PERM = 255  # PermName's bits (PRIORITY 8, READ 4, WRITE 2, INHERIT 1) fit in one byte
MAX_ENTRIES = 4096  # QueueDatas and BrokerDatas each: broker groups of one cluster
MAX_ROUTE_QUEUES = 1 << 20  # sum over QueueDatas of max(readQueueNums, writeQueueNums)


class RouteDataError(ValueError):
    """A body that is not a TopicRouteData; the message names the field."""


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = 0
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}


@dataclass(frozen=True, slots=True)
class BrokerData:
    broker_name: str
    broker_addrs: Mapping[int, str] = field(default_factory=dict)  # brokerId -> "host:port"
    cluster: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": dict(self.broker_addrs), "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    order_topic_conf: str = ""

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's field names, ``brokerAddrs`` with int keys (what mqctl prints and reads)."""
        out: dict[str, Any] = {"brokerDatas": [b.to_json() for b in self.broker_datas], "filterServerTable": {}}
        if self.order_topic_conf:
            out["orderTopicConf"] = self.order_topic_conf
        out["queueDatas"] = [q.to_json() for q in self.queue_datas]
        return out


def read_topic_route(body: bytes | memoryview | str | Mapping[str, Any]) -> TopicRouteData:
    """The TopicRouteData in ``body`` (its bytes, or the JSON already parsed); ``RouteDataError`` otherwise."""
    if isinstance(body, Mapping):
        data: Any = body
    else:
        try:
            data = fastjson.loads(body or b"{}")
        except (fastjson.JsonBodyError, UnicodeDecodeError) as exc:
            raise RouteDataError(f"TopicRouteData is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise RouteDataError(f"TopicRouteData is a JSON {type(data).__name__}, not an object")
    try:
        queue_datas = tuple(_queue_data(q, f"queueDatas[{i}]") for i, q in enumerate(_array(data, "queueDatas")))
        broker_datas = tuple(_broker_data(b, f"brokerDatas[{i}]") for i, b in enumerate(_array(data, "brokerDatas")))
    except NumberError as exc:
        raise RouteDataError(f"TopicRouteData: {exc}") from None
    total = sum(max(q.read_queue_nums, q.write_queue_nums) for q in queue_datas)
    if total > MAX_ROUTE_QUEUES:
        raise RouteDataError(f"TopicRouteData names {total} queues, more than {MAX_ROUTE_QUEUES}")
    order = data.get("orderTopicConf")
    if order is not None and not isinstance(order, str):
        raise RouteDataError(f"TopicRouteData: orderTopicConf is {type(order).__name__}, not a string")
    return TopicRouteData(queue_datas, broker_datas, order or "")


def _array(data: Mapping[str, Any], name: str) -> list[Any]:
    value = data.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RouteDataError(f"TopicRouteData: {name} is {type(value).__name__}, not an array")
    if len(value) > MAX_ENTRIES:
        raise RouteDataError(f"TopicRouteData: {name} has {len(value)} entries, more than {MAX_ENTRIES}")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RouteDataError(f"TopicRouteData: {where} is {type(value).__name__}, not an object")
    return value


def _name(obj: Mapping[str, Any], where: str) -> str:
    name = obj.get("brokerName")
    if not isinstance(name, str) or not name:
        raise RouteDataError(f"TopicRouteData: {where}.brokerName is {name!r}, not a broker name")
    return name


def _int(obj: Mapping[str, Any], key: str, hi: int, where: str) -> int:
    value = obj.get(key)
    return 0 if value is None else parse_int(value, 0, hi, what=f"{where}.{key}")


def _queue_data(value: Any, where: str) -> QueueData:
    obj = _object(value, where)
    return QueueData(
        broker_name=_name(obj, where),
        read_queue_nums=_int(obj, "readQueueNums", MAX_QUEUE_NUMS, where),
        write_queue_nums=_int(obj, "writeQueueNums", MAX_QUEUE_NUMS, where),
        perm=_int(obj, "perm", MAX_PERM, where),
        topic_sys_flag=_int(obj, "topicSysFlag", INT_MAX, where),
    )


def _broker_data(value: Any, where: str) -> BrokerData:
    obj = _object(value, where)
    cluster = obj.get("cluster")
    if cluster is not None and not isinstance(cluster, str):
        raise RouteDataError(f"TopicRouteData: {where}.cluster is {type(cluster).__name__}, not a string")
    raw = _object(obj.get("brokerAddrs") or {}, f"{where}.brokerAddrs")
    if len(raw) > MAX_ENTRIES:
        raise RouteDataError(f"TopicRouteData: {where}.brokerAddrs has {len(raw)} entries, more than {MAX_ENTRIES}")
    addrs: dict[int, str] = {}
    for key, addr in raw.items():
        broker_id = parse_int(key, 0, LONG_MAX, what=f"{where}.brokerAddrs brokerId")
        if not isinstance(addr, str):
            raise RouteDataError(f"TopicRouteData: {where}.brokerAddrs[{broker_id}] is {type(addr).__name__}")
        parse_host_port(addr, f"{where}.brokerAddrs[{broker_id}]")
        addrs[broker_id] = addr
    return BrokerData(_name(obj, where), addrs, cluster or "")
