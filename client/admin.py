"""AdminClient: RocketMQ's admin requests over remoting (what mqadmin's DefaultMQAdminExt sends), for mqctl and tests.

One ``ClientRemoting`` per AdminClient carries its nameserver and broker requests. Methods send the request codes
of spec remoting.md §2.1/§2.4 with RocketMQ's header fields and bodies, and return the answer's useful part as the
small dataclasses of ``client.admin_bodies`` (attribute names in snake_case, as pyrmq's admin API always had).
A code other than SUCCESS raises ``BrokerError`` with the server's remark (the few codes that mean "nothing there"
are answered as such, e.g. ``query_consumer_offset`` -> -1); a server that does not answer raises
``BrokerUnreachableError`` / ``RequestTimeout``; no nameserver answering raises ``NoNameserverError``.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Any

import client.admin_bodies as bodies
from client.errors import BrokerError, NoRouteError
from client.lifecycle import Lifecycle
from client.message import SEND_STATUS_BY_CODE, Message, MessageQueue, SendResult
from client.namesrv import NamesrvClient, parse_body
from client.route_cache import TopicRoute, default_route_data, route_from_data
from client.rpc import ClientRemoting, request_name
from common.broker_id import MASTER_ID
from common.perm import PERM_RW
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from remoting.headers import parse_int
from remoting.message_codec import StoredMessage, iter_records
from remoting.message_headers import DEFAULT_TOPIC, SendHeader

# The KV namespace whose entries are routes' orderTopicConf ("brokerName:queueNums;..."), RocketMQ's NamesrvUtil.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]  # brokerId -> addr; 0 is the master


@dataclass(slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]  # brokerName -> its addresses
    cluster_addr_table: dict[str, list[str]]  # cluster -> brokerNames


@dataclass(slots=True)
class SendRoute:
    """TopicRouteData (RocketMQ's field names) to send by; ``is_default``: the topic has no route yet and this is
    TBW102's, so the first send creates the topic on a broker that allows auto-creation."""

    data: dict[str, Any]
    is_default: bool


@dataclass(slots=True)
class QueueRange:
    min_offset: int
    max_offset: int  # the next offset to be written (0 for an empty queue)


class AdminClient(Lifecycle):
    def __init__(self, namesrv_addr: str, *, timeout_s: float = 5.0,
                 credentials: tuple[str, str] | None = None, tls: bool | ssl.SSLContext = False,
                 tls_ca: str = "") -> None:
        self.timeout_s = timeout_s
        self.remoting = ClientRemoting(name="pyrmq-admin", credentials=credentials, tls=tls, tls_ca=tls_ca)
        self.namesrv = (
            NamesrvClient(namesrv_addr, remoting=self.remoting, timeout_s=timeout_s) if namesrv_addr else None
        )

    async def start(self) -> AdminClient:
        return self

    async def stop(self) -> None:
        await self.remoting.close()

    # helpers ------------------------------------------------------------------------------------------------
    def _ns(self) -> NamesrvClient:
        if self.namesrv is None:
            raise ValueError("this AdminClient has no nameserver address")
        return self.namesrv

    async def _call(
        self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"", what: str = ""
    ) -> RemotingCommand:
        """One request to a broker; BrokerError unless it answers SUCCESS."""
        return await self.remoting.call(addr, code, ext, body, timeout_s=self.timeout_s, what=what)

    async def _invoke(self, addr: str, code: int, ext: dict[str, str] | None = None, what: str = "") -> RemotingCommand:
        """One request to a broker, answered whatever its code."""
        request = RemotingCommand(code, ext=ext)
        return await self.remoting.invoke(addr, request, self.timeout_s, what or request_name(code))

    # nameserver -------------------------------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        data = await self._ns().cluster_info()
        table = {
            name: BrokerData(str(bd.get("cluster", "")), str(bd.get("brokerName") or name), dict(bd["brokerAddrs"]))
            for name, bd in data["brokerAddrTable"].items()
        }
        return ClusterInfo(table, {c: sorted(names) for c, names in data["clusterAddrTable"].items()})

    async def topic_route(self, topic: str) -> TopicRoute:
        """The topic's route as the SDK uses it; NoRouteError when the nameserver knows none."""
        return route_from_data(topic, await self._ns().topic_route_data(topic))

    async def topic_route_raw(self, topic: str) -> dict[str, Any]:
        """TopicRouteData with RocketMQ's field names (``queueDatas``, ``brokerDatas``, ``orderTopicConf``...)."""
        return (await self._ns().topic_route_data(topic)).to_json()

    async def topic_route_for_send(self, topic: str, *, default_topic_queue_nums: int = 4) -> SendRoute:
        """The route a producer sends ``topic`` by, as RocketMQ's producer finds it: the topic's own TopicRouteData;
        when the nameserver has none, the ``TBW102`` route that brokers with autoCreateTopicEnable=true register,
        each group capped at ``default_topic_queue_nums`` queues (``route_cache.default_route_data``), so a send
        there makes the broker create the topic. NoRouteError, saying why, when no broker registers TBW102."""
        ns = self._ns()
        try:
            return SendRoute((await ns.topic_route_data(topic)).to_json(), is_default=False)
        except NoRouteError:
            pass
        try:
            template = await ns.topic_route_data(DEFAULT_TOPIC)
        except NoRouteError:
            raise NoRouteError(topic, f"the nameserver has none, and no broker registers {DEFAULT_TOPIC}: every broker "
                                      "runs with autoCreateTopicEnable=false, so none creates a topic on a first send"
                               ) from None
        return SendRoute(default_route_data(template, default_topic_queue_nums).to_json(), is_default=True)

    async def all_topics(self) -> list[str]:
        response = await self._ns().call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        data = parse_body(response, "topic list")
        return sorted(str(t) for t in (data.get("topicList") or []))

    async def delete_topic_in_namesrv(self, topic: str, cluster: str = "") -> None:
        ext = {"topic": topic, **({"clusterName": cluster} if cluster else {})}
        await self._ns().call(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)

    async def wipe_write_perm(self, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER (205): the number of topics whose write permission was removed."""
        response = await self._ns().call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        return parse_int((response.ext or {}).get("wipeTopicCount", 0), what="wipeTopicCount")

    async def add_write_perm(self, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER (327): the number of topics whose write permission was restored."""
        response = await self._ns().call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        return parse_int((response.ext or {}).get("addTopicCount", 0), what="addTopicCount")

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG (101); None when the nameserver has no such entry (QUERY_NOT_FOUND)."""
        response = await self._ns().invoke(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark or "", self._ns().current, request="GET_KV_CONFIG (101)",
                              request_code=RequestCode.GET_KV_CONFIG)
        return (response.ext or {}).get("value")

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        await self._ns().call(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        await self._ns().call(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName -> master address, for one cluster or all."""
        info = await self.cluster_info()
        names = set(info.broker_addr_table)
        if cluster is not None:
            names = set(info.cluster_addr_table.get(cluster, ()))
        out = {}
        for name in sorted(names):
            data = info.broker_addr_table.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                out[name] = data.broker_addrs[MASTER_ID]
        return out

    # topics and groups on a broker ------------------------------------------------------------------------
    async def update_topic(
        self,
        broker_addr: str,
        topic: str,
        *,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = PERM_RW,
        topic_sys_flag: int = 0,
        order: bool = False,
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC (17), CreateTopicRequestHeader."""
        ext = {
            "topic": topic,
            "defaultTopic": DEFAULT_TOPIC,
            "readQueueNums": str(read_queue_nums),
            "writeQueueNums": str(write_queue_nums),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": str(topic_sys_flag),
            "order": "true" if order else "false",
        }
        await self._call(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, what=f"UPDATE_AND_CREATE_TOPIC {topic}")

    async def create_topic_on_cluster(self, topic: str, cluster: str | None = None, **fields: Any) -> list[str]:
        """update_topic on every master of ``cluster`` (all clusters when None); returns the brokers used."""
        masters = await self.masters(cluster)
        for addr in masters.values():
            await self.update_topic(addr, topic, **fields)
        return sorted(masters)

    async def delete_topic(self, broker_addr: str, topic: str) -> None:
        await self._call(broker_addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})

    async def update_subscription_group(
        self,
        broker_addr: str,
        group: str,
        *,
        consume_enable: bool = True,
        consume_from_min_enable: bool = True,
        consume_broadcast_enable: bool = True,
        retry_queue_nums: int = 1,
        retry_max_times: int = 16,
        broker_id: int = 0,
        which_broker_when_consume_slowly: int = 1,
        notify_consumer_ids_changed_enable: bool = True,
        consume_message_orderly: bool = False,
    ) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): the body is the whole SubscriptionGroupConfig."""
        config = bodies.SubscriptionGroupConfig(
            group_name=group,
            consume_enable=consume_enable,
            consume_from_min_enable=consume_from_min_enable,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_queue_nums=retry_queue_nums,
            retry_max_times=retry_max_times,
            broker_id=broker_id,
            which_broker_when_consume_slowly=which_broker_when_consume_slowly,
            notify_consumer_ids_changed_enable=notify_consumer_ids_changed_enable,
            consume_message_orderly=consume_message_orderly,
        )
        await self._call(
            broker_addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, fastjson.dumps(config.to_json())
        )

    async def delete_subscription_group(self, broker_addr: str, group: str, *, remove_offset: bool = False) -> None:
        """DELETE_SUBSCRIPTIONGROUP (207); the offsets flag under 4.9's name and 5.x's (``cleanOffset``)."""
        flag = "true" if remove_offset else "false"
        ext = {"groupName": group, "removeOffset": flag, "cleanOffset": flag}
        await self._call(broker_addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext)

    # broker state -----------------------------------------------------------------------------------------
    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        response = await self._call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return bodies.parse_kv_table(response.body_bytes(), "GET_BROKER_RUNTIME_INFO")

    async def broker_config(self, addr: str) -> dict[str, str]:
        return bodies.parse_properties((await self._call(addr, RequestCode.GET_BROKER_CONFIG)).body_bytes())

    async def ha_status(self, addr: str) -> bodies.HAStatus:
        return bodies.parse_ha_status((await self._call(addr, RequestCode.GET_BROKER_HA_STATUS)).body_bytes())

    async def consume_stats(self, addr: str, group: str, topic: str = "") -> bodies.ConsumeStats:
        """GET_CONSUME_STATS (208): per read queue of ``topic``, or of every topic the group has offsets for."""
        ext = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        response = await self._call(addr, RequestCode.GET_CONSUME_STATS, ext, what=f"GET_CONSUME_STATS {group}")
        return bodies.parse_consume_stats(response.body_bytes(), group)

    async def topic_stats(self, addr: str, topic: str) -> bodies.TopicStats:
        """GET_TOPIC_STATS_INFO (202): min/max offset and last store time of every write queue."""
        response = await self._call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        return bodies.parse_topic_stats(response.body_bytes(), topic)

    async def all_consumer_offsets(self, addr: str) -> bodies.AllConsumerOffset:
        response = await self._call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        return bodies.parse_all_consumer_offsets(response.body_bytes())

    async def all_delay_offsets(self, addr: str) -> dict[int, int]:
        return bodies.parse_all_delay_offsets((await self._call(addr, RequestCode.GET_ALL_DELAY_OFFSET)).body_bytes())

    async def all_subscription_groups(self, addr: str) -> bodies.AllSubscriptionGroupConfig:
        response = await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return bodies.parse_all_subscription_groups(response.body_bytes())

    async def all_topic_configs(self, addr: str) -> bodies.AllTopicConfig:
        return bodies.parse_all_topic_config((await self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)).body_bytes())

    async def consumer_connection(self, addr: str, group: str) -> bodies.ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST (203): the group's clients on this broker and their subscriptions;
        BrokerError with CONSUMER_NOT_ONLINE (206) when none is connected."""
        response = await self._call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        return bodies.parse_consumer_connection(response.body_bytes(), group)

    # queues and offsets -----------------------------------------------------------------------------------
    async def queue_offsets(self, addr: str, topic: str, queue_id: int) -> QueueRange:
        """GET_MIN_OFFSET (31) and GET_MAX_OFFSET (30) of one queue, asked together."""
        ext = {"topic": topic, "queueId": str(queue_id)}
        low, high = await asyncio.gather(
            self._call(addr, RequestCode.GET_MIN_OFFSET, ext), self._call(addr, RequestCode.GET_MAX_OFFSET, ext)
        )
        return QueueRange(_long(low, "offset", addr), _long(high, "offset", addr))

    async def query_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when none is stored (QUERY_NOT_FOUND)."""
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        response = await self._invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET, ext)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark or "", addr, request="QUERY_CONSUMER_OFFSET (14)",
                              request_code=RequestCode.QUERY_CONSUMER_OFFSET)
        return _long(response, "offset", addr)

    async def update_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET (15), answered (RocketMQ clients often send it oneway)."""
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
        await self._call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)

    async def consumer_ids(self, addr: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP (38); [] when no consumer of the group is connected to this broker (Java
        answers that with SYSTEM_ERROR "no consumer for this group", RocketMQ 5 with CONSUMER_NOT_ONLINE)."""
        response = await self._invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE or (
            response.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (response.remark or "")
        ):
            return []
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark or "", addr, request="GET_CONSUMER_LIST_BY_GROUP (38)",
                              request_code=RequestCode.GET_CONSUMER_LIST_BY_GROUP)
        data = bodies.load_object(response.body_bytes(), "GET_CONSUMER_LIST_BY_GROUP")
        return sorted(str(c) for c in data.get("consumerIdList") or [])

    async def view_message(self, addr: str, physical_offset: int) -> bytes:
        """VIEW_MESSAGE_BY_ID (33): the stored record at a commitlog offset (decode with remoting.message_codec)."""
        response = await self._call(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(physical_offset)})
        return response.body_bytes()

    async def query_message(
        self, addr: str, topic: str, key: str, *, max_num: int = 64, begin_ms: int = 0, end_ms: int = 2**63 - 1,
        unique: bool = False,
    ) -> list[StoredMessage]:
        """QUERY_MESSAGE (12): the stored messages of ``topic`` whose KEYS hold ``key`` (or, with ``unique``, whose
        UNIQ_KEY is ``key``) from that broker's message index, newest first; [] when it has none (22)."""
        ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin_ms),
               "endTimestamp": str(end_ms), "_UNIQUE_KEY_QUERY": "true" if unique else "false"}
        response = await self._invoke(addr, RequestCode.QUERY_MESSAGE, ext)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, addr, request="QUERY_MESSAGE")
        return list(iter_records(response.body_bytes()))

    async def send_message(
        self, addr: str, mq: MessageQueue, message: Message, *, producer_group: str = "TOOLS_PRODUCER"
    ) -> SendResult:
        """SEND_MESSAGE_V2 (310) of one message to one queue of the master at ``addr`` (mqadmin sendMessage with
        -b/-i). Any of the four stored codes gives a SendResult; another raises BrokerError."""
        now_ms = int(time.time() * 1000)
        header = SendHeader(
            producer_group=producer_group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            born_timestamp=now_ms,
            flag=message.flag,
            properties=message.wire_properties(now_ms),
            broker_name=mq.broker_name,
            timeout_millis=int(self.timeout_s * 1000),  # the broker answers its slave/flush status before then
        )
        request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext=header.to_v2(), body=message.body)
        response = await self.remoting.invoke(addr, request, self.timeout_s, "SEND_MESSAGE_V2 (310)")
        return _send_result(response, addr, mq, message.msg_id)


def _send_result(response: RemotingCommand, addr: str, mq: MessageQueue, msg_id: str) -> SendResult:
    status = SEND_STATUS_BY_CODE.get(response.code)
    if status is None:
        raise BrokerError(response.code, response.remark or "", addr, request="SEND_MESSAGE_V2 (310)",
                          request_code=RequestCode.SEND_MESSAGE_V2)
    ext = response.ext or {}
    queue = MessageQueue(mq.topic, mq.broker_name, _long(response, "queueId", addr, mq.queue_id))
    return SendResult(status, msg_id, ext.get("msgId", ""), queue, _long(response, "queueOffset", addr, -1))


def _long(response: RemotingCommand, field: str, addr: str, default: int | None = None) -> int:
    """A number from the answer's header; BrokerError naming the field when it is not a number (or is missing and
    there is no ``default``)."""
    value = (response.ext or {}).get(field, default)
    try:
        return parse_int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BrokerError(ResponseCode.SYSTEM_ERROR, f"the answer's {field} header is {value!r}", addr) from None
