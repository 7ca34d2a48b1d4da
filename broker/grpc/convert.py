"""Proto <-> domain conversions for the broker's servicers (RocketMQ proxy's GrpcConverter).

Kept free of logic so handlers stay thin. ``drafts`` is on the send hot path: one small object per message,
the born host parsed once per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.metadata.data_version import DataVersion
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.metadata.topics import TopicConfig
from broker.store.types import MessageDraft
from remoting.pb import admin_pb2, common_pb2


def parse_host(text: str) -> tuple[str, int]:
    """``"ip:port"`` -> (ip, port); anything unparsable becomes ("127.0.0.1", 0) (the field is informational)."""
    host, _, port = text.rpartition(":")
    if host and port.isdigit() and host.count(".") == 3 and all(p.isdigit() and int(p) < 256 for p in host.split(".")):
        return host, int(port) & 0x7FFFFFFF
    return "127.0.0.1", 0


def drafts(messages: Sequence, born_host: str, reconsume_times: int = 0) -> list[MessageDraft]:
    host = parse_host(born_host)
    return [
        MessageDraft(
            body=m.body,
            properties=dict(m.properties),
            flag=m.flag,
            born_timestamp=m.born_timestamp,
            born_host=host,
            reconsume_times=reconsume_times,
        )
        for m in messages
    ]


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
