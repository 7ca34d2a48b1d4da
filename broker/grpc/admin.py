"""The broker's BrokerAdmin servicer: one line per RPC, routing to the admin handler modules."""

from __future__ import annotations

from broker.context import BrokerContext
from broker.grpc.guard import guarded
from broker.grpc.handlers import admin_groups, admin_info, admin_topics
from remoting.pb import admin_pb2, admin_pb2_grpc, common_pb2


class BrokerAdminServicer(admin_pb2_grpc.BrokerAdminServicer):
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    UpdateAndCreateTopic = guarded(common_pb2.Ack, admin_topics.update)
    DeleteTopic = guarded(common_pb2.Ack, admin_topics.delete)
    GetAllTopicConfig = guarded(admin_pb2.AllTopicConfig, admin_topics.get_all)
    GetTopicStats = guarded(admin_pb2.TopicStats, admin_topics.stats)
    UpdateAndCreateSubscriptionGroup = guarded(common_pb2.Ack, admin_groups.update)
    DeleteSubscriptionGroup = guarded(common_pb2.Ack, admin_groups.delete)
    GetAllSubscriptionGroupConfig = guarded(admin_pb2.AllSubscriptionGroupConfig, admin_groups.get_all)
    GetAllConsumerOffset = guarded(admin_pb2.AllConsumerOffset, admin_groups.all_consumer_offsets)
    GetAllDelayOffset = guarded(admin_pb2.AllDelayOffset, admin_groups.all_delay_offsets)
    GetConsumeStats = guarded(admin_pb2.ConsumeStats, admin_groups.consume_stats)
    GetBrokerRuntimeInfo = guarded(admin_pb2.KeyValueTable, admin_info.runtime_info)
    GetBrokerConfig = guarded(admin_pb2.KeyValueTable, admin_info.broker_config)
    GetHAStatus = guarded(admin_pb2.HAStatus, admin_info.ha_status)
