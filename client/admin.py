"""AdminClient: thin async wrappers over the nameserver and broker admin RPCs, for mqctl and tests.

Every method returns the response message (or its useful part) and raises BrokerError on a non-success code,
BrokerUnreachableError / RequestTimeout when the broker does not answer, NoNameserverError when no nameserver
does.
"""

from __future__ import annotations

from typing import Any, Self

from client.errors import BrokerError, NoRouteError
from client.namesrv import NamesrvClient
from client.route_cache import TopicRoute, build_route
from client.rpc import BrokerChannels
from remoting.codes import ResponseCode
from remoting.pb import admin_pb2, broker_pb2, common_pb2, namesrv_pb2

PERM_RW = 6


class AdminClient:
    def __init__(self, namesrv_addr: str, *, timeout_s: float = 5.0) -> None:
        self.namesrv = NamesrvClient(namesrv_addr, timeout_s=timeout_s) if namesrv_addr else None
        self.channels = BrokerChannels()
        self.timeout_s = timeout_s

    async def start(self) -> AdminClient:
        return self

    async def stop(self) -> None:
        await self.channels.close()
        if self.namesrv is not None:
            await self.namesrv.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # helpers ------------------------------------------------------------------------------------------------
    def _ns(self) -> NamesrvClient:
        if self.namesrv is None:
            raise ValueError("this AdminClient has no nameserver address")
        return self.namesrv

    async def _ns_call(self, method: str, request: Any) -> Any:
        resp = await self._ns().call(method, request, self.timeout_s)
        _check(resp, self._ns().addrs[0] if len(self._ns().addrs) == 1 else ";".join(self._ns().addrs), method)
        return resp

    async def _broker(self, addr: str, service: str, method: str, request: Any) -> Any:
        stubs = self.channels.get(addr)
        resp = await self.channels.call(addr, getattr(getattr(stubs, service), method), request, self.timeout_s, method)
        _check(resp, addr, method)
        return resp

    # nameserver -------------------------------------------------------------------------------------------
    async def cluster_info(self) -> namesrv_pb2.GetBrokerClusterInfoResponse:
        return await self._ns_call("GetBrokerClusterInfo", namesrv_pb2.GetBrokerClusterInfoRequest())

    async def topic_route(self, topic: str) -> TopicRoute:
        request = namesrv_pb2.GetRouteInfoRequest(topic=topic)
        resp = await self._ns().call("GetRouteInfoByTopic", request, self.timeout_s)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NoRouteError(topic, resp.remark)
        _check(resp, ";".join(self._ns().addrs), "GetRouteInfoByTopic")
        return build_route(topic, resp.route.queue_datas, resp.route.broker_datas)

    async def topic_route_raw(self, topic: str) -> namesrv_pb2.GetRouteInfoResponse:
        return await self._ns_call("GetRouteInfoByTopic", namesrv_pb2.GetRouteInfoRequest(topic=topic))

    async def all_topics(self) -> list[str]:
        resp = await self._ns_call("GetAllTopicList", namesrv_pb2.GetAllTopicListRequest())
        return sorted(resp.topics)

    async def delete_topic_in_namesrv(self, topic: str, cluster: str = "") -> None:
        await self._ns_call("DeleteTopic", namesrv_pb2.DeleteTopicRequest(topic=topic, cluster_name=cluster))

    async def wipe_write_perm(self, broker_name: str) -> int:
        resp = await self._ns_call("WipeWritePerm", namesrv_pb2.WipeWritePermRequest(broker_name=broker_name))
        return resp.wiped_topic_count

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName -> master address, for one cluster or all."""
        info = await self.cluster_info()
        names = set(info.broker_addr_table)
        if cluster is not None:
            names = set(info.cluster_addr_table[cluster].broker_names) if cluster in info.cluster_addr_table else set()
        out = {}
        for name in sorted(names):
            addrs = info.broker_addr_table[name].broker_addrs
            if 0 in addrs:
                out[name] = addrs[0]
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
        config = common_pb2.TopicConfig(
            topic_name=topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            topic_sys_flag=topic_sys_flag,
            order=order,
        )
        await self._broker(broker_addr, "admin", "UpdateAndCreateTopic", config)

    async def create_topic_on_cluster(self, topic: str, cluster: str | None = None, **fields: Any) -> list[str]:
        """update_topic on every master of ``cluster`` (all clusters when None); returns the brokers used."""
        masters = await self.masters(cluster)
        for addr in masters.values():
            await self.update_topic(addr, topic, **fields)
        return sorted(masters)

    async def delete_topic(self, broker_addr: str, topic: str) -> None:
        await self._broker(broker_addr, "admin", "DeleteTopic", admin_pb2.DeleteTopicRequest(topic=topic))

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
    ) -> None:
        config = admin_pb2.SubscriptionGroupConfig(
            group_name=group,
            consume_enable=consume_enable,
            consume_from_min_enable=consume_from_min_enable,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_queue_nums=retry_queue_nums,
            retry_max_times=retry_max_times,
            broker_id=broker_id,
            which_broker_when_consume_slowly=which_broker_when_consume_slowly,
            notify_consumer_ids_changed_enable=notify_consumer_ids_changed_enable,
        )
        await self._broker(broker_addr, "admin", "UpdateAndCreateSubscriptionGroup", config)

    async def delete_subscription_group(self, broker_addr: str, group: str, *, remove_offset: bool = False) -> None:
        request = admin_pb2.DeleteSubscriptionGroupRequest(group_name=group, remove_offset=remove_offset)
        await self._broker(broker_addr, "admin", "DeleteSubscriptionGroup", request)

    # broker state -----------------------------------------------------------------------------------------
    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        return dict((await self._broker(addr, "admin", "GetBrokerRuntimeInfo", admin_pb2.Empty())).table)

    async def broker_config(self, addr: str) -> dict[str, str]:
        return dict((await self._broker(addr, "admin", "GetBrokerConfig", admin_pb2.Empty())).table)

    async def ha_status(self, addr: str) -> admin_pb2.HAStatus:
        return await self._broker(addr, "admin", "GetHAStatus", admin_pb2.Empty())

    async def consume_stats(self, addr: str, group: str, topic: str = "") -> admin_pb2.ConsumeStats:
        request = admin_pb2.GetConsumeStatsRequest(consumer_group=group, topic=topic)
        return await self._broker(addr, "admin", "GetConsumeStats", request)

    async def topic_stats(self, addr: str, topic: str) -> admin_pb2.TopicStats:
        return await self._broker(addr, "admin", "GetTopicStats", admin_pb2.GetTopicStatsRequest(topic=topic))

    async def all_consumer_offsets(self, addr: str) -> admin_pb2.AllConsumerOffset:
        return await self._broker(addr, "admin", "GetAllConsumerOffset", admin_pb2.Empty())

    async def all_subscription_groups(self, addr: str) -> admin_pb2.AllSubscriptionGroupConfig:
        return await self._broker(addr, "admin", "GetAllSubscriptionGroupConfig", admin_pb2.Empty())

    async def all_topic_configs(self, addr: str) -> admin_pb2.AllTopicConfig:
        return await self._broker(addr, "admin", "GetAllTopicConfig", admin_pb2.Empty())

    # queues and offsets -----------------------------------------------------------------------------------
    async def queue_offsets(self, addr: str, topic: str, queue_id: int) -> broker_pb2.GetQueueOffsetsResponse:
        request = broker_pb2.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id)
        return await self._broker(addr, "messaging", "GetQueueOffsets", request)

    async def query_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when none is stored."""
        request = broker_pb2.QueryConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id)
        stubs = self.channels.get(addr)
        resp = await self.channels.call(addr, stubs.messaging.QueryConsumerOffset, request, self.timeout_s)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        _check(resp, addr, "QueryConsumerOffset")
        return resp.offset

    async def update_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        request = broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
        )
        await self._broker(addr, "messaging", "UpdateConsumerOffset", request)

    async def consumer_ids(self, addr: str, group: str) -> list[str]:
        request = broker_pb2.GetConsumerIdListRequest(consumer_group=group)
        return sorted((await self._broker(addr, "messaging", "GetConsumerIdList", request)).consumer_ids)

    async def view_message(self, addr: str, physical_offset: int) -> bytes:
        request = broker_pb2.ViewMessageRequest(physical_offset=physical_offset)
        return (await self._broker(addr, "messaging", "ViewMessage", request)).record


def _check(resp: Any, addr: str, method: str) -> None:
    code = getattr(resp, "code", ResponseCode.SUCCESS)
    if code != ResponseCode.SUCCESS:
        raise BrokerError(code, getattr(resp, "remark", ""), addr, request=method)
