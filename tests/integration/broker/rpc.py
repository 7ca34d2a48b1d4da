"""A minimal grpc.aio client for driving a real broker in tests (the SDK is tested on its own)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from remoting.channel import aio_channel
from remoting.message_codec import StoredMessage, iter_records
from remoting.pb import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2_grpc
from tests.support.procs import Broker

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2


def message(body: bytes, **props: str) -> broker_pb2.Message:
    return broker_pb2.Message(body=body, properties=props, born_timestamp=int(time.time() * 1000))


def group_config(name: str, **overrides) -> admin_pb2.SubscriptionGroupConfig:
    values = {
        "group_name": name,
        "consume_enable": True,
        "consume_from_min_enable": True,
        "consume_broadcast_enable": True,
        "retry_queue_nums": 1,
        "retry_max_times": 16,
        "broker_id": 0,
        "which_broker_when_consume_slowly": 1,
        "notify_consumer_ids_changed_enable": True,
    }
    values.update(overrides)
    return admin_pb2.SubscriptionGroupConfig(**values)


@dataclass
class Pulled:
    response: broker_pb2.PullMessageResponse
    messages: list[StoredMessage]

    @property
    def code(self) -> int:
        return self.response.code


class BrokerClient:
    def __init__(self, addr: str) -> None:
        self.channel = aio_channel(addr)
        self.msg = broker_pb2_grpc.MessagingStub(self.channel)
        self.admin = admin_pb2_grpc.BrokerAdminStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    async def send(
        self, topic: str, queue_id: int, messages: list[broker_pb2.Message], **kw
    ) -> broker_pb2.SendMessageResponse:
        req = broker_pb2.SendMessageRequest(
            producer_group="test-producer",
            topic=topic,
            queue_id=queue_id,
            messages=messages,
            born_host="127.0.0.1:40000",
            **kw,
        )
        return await self.msg.SendMessage(req, timeout=10)

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        *,
        sys_flag: int = 0,
        suspend_ms: int = 0,
        subscription: str = "*",
        commit_offset: int = 0,
        timeout: float = 20,
    ) -> Pulled:
        req = broker_pb2.PullMessageRequest(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=sys_flag,
            suspend_timeout_millis=suspend_ms,
            subscription=subscription,
            commit_offset=commit_offset,
        )
        resp = await self.msg.PullMessage(req, timeout=timeout)
        return Pulled(resp, list(iter_records(resp.records, check_crc=True)) if resp.records else [])

    async def pull_all(self, group: str, topic: str, queue_id: int, start: int = 0, **kw) -> list[StoredMessage]:
        out: list[StoredMessage] = []
        offset = start
        for _ in range(100_000):
            got = await self.pull(group, topic, queue_id, offset, **kw)
            if got.code != 0:
                return out
            out.extend(got.messages)
            offset = got.response.next_begin_offset
        raise AssertionError("pull_all did not reach the end of the queue")

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> common_pb2.Ack:
        return await self.admin.UpdateAndCreateTopic(
            common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm),
            timeout=10,
        )

    async def query_offset(self, group: str, topic: str, queue_id: int) -> broker_pb2.QueryConsumerOffsetResponse:
        return await self.msg.QueryConsumerOffset(
            broker_pb2.QueryConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id), timeout=10
        )

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> common_pb2.Ack:
        return await self.msg.UpdateConsumerOffset(
            broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
            ),
            timeout=10,
        )

    async def runtime_info(self) -> dict[str, str]:
        resp = await self.admin.GetBrokerRuntimeInfo(admin_pb2.Empty(), timeout=10)
        return dict(resp.table)


def namesrv_stub(addr: str):
    channel = aio_channel(addr)
    return channel, namesrv_pb2_grpc.NameServerStub(channel)


def make_broker(workdir: Path, **conf: object) -> Broker:
    """A broker process for these tests (real `python -m broker`, see tests/support/procs.py)."""
    return Broker(workdir, **conf)
