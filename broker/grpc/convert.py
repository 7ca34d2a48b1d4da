"""Proto <-> domain conversions of the remaining gRPC admin and slave-sync code (removed with it; the remoting
processors in ``broker.processors`` do not use this module)."""

from __future__ import annotations

from broker.metadata.data_version import DataVersion
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.metadata.topics import TopicConfig
from remoting.pb import admin_pb2, common_pb2


def data_version_pb(dv: DataVersion) -> common_pb2.DataVersion:
    return common_pb2.DataVersion(timestamp=dv.timestamp, counter=dv.counter)


def data_version_from_pb(pb: common_pb2.DataVersion) -> DataVersion:
    return DataVersion(timestamp=pb.timestamp, counter=pb.counter)


def topic_config_pb(cfg: TopicConfig, perm: int | None = None) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic_name=cfg.topic_name,
        read_queue_nums=cfg.read_queue_nums,
        write_queue_nums=cfg.write_queue_nums,
        perm=cfg.perm if perm is None else perm,
        topic_sys_flag=cfg.topic_sys_flag,
        order=cfg.order,
    )


def topic_config_from_pb(pb: common_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(
        topic_name=pb.topic_name,
        read_queue_nums=pb.read_queue_nums,
        write_queue_nums=pb.write_queue_nums,
        perm=pb.perm,
        topic_sys_flag=pb.topic_sys_flag,
        order=pb.order,
    )


def group_config_pb(cfg: SubscriptionGroupConfig) -> admin_pb2.SubscriptionGroupConfig:
    return admin_pb2.SubscriptionGroupConfig(**cfg.as_dict())


def group_config_from_pb(pb: admin_pb2.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(
        group_name=pb.group_name,
        consume_enable=pb.consume_enable,
        consume_from_min_enable=pb.consume_from_min_enable,
        consume_broadcast_enable=pb.consume_broadcast_enable,
        retry_queue_nums=pb.retry_queue_nums,
        retry_max_times=pb.retry_max_times,
        broker_id=pb.broker_id,
        which_broker_when_consume_slowly=pb.which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=pb.notify_consumer_ids_changed_enable,
    )
