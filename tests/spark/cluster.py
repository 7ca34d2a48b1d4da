"""Blocking helpers for the Spark tier: create topics, send, read a whole topic back (checks on the broker)."""

from __future__ import annotations

import time

import grpc

from remoting.channel import CHANNEL_OPTIONS
from remoting.codes import SEND_OK_CODES, ResponseCode
from remoting.message_codec import StoredMessage, iter_records
from remoting.pb import admin_pb2_grpc, broker_pb2, broker_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.support.waiting import wait_until


def _channel(addr: str) -> grpc.Channel:
    return grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)


def create_topic(broker_addr: str, namesrv_addr: str, topic: str, queues: int = 4) -> None:
    with _channel(broker_addr) as ch:
        ack = admin_pb2_grpc.BrokerAdminStub(ch).UpdateAndCreateTopic(
            common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=6),
            timeout=10,
        )
    assert ack.code == ResponseCode.SUCCESS, ack.remark
    wait_route(namesrv_addr, topic, queues)


def wait_route(namesrv_addr: str, topic: str, queues: int, timeout_s: float = 20.0) -> None:
    with _channel(namesrv_addr) as ch:
        stub = namesrv_pb2_grpc.NameServerStub(ch)

        def ready() -> bool:
            resp = stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=5)
            return (
                resp.code == ResponseCode.SUCCESS and sum(q.read_queue_nums for q in resp.route.queue_datas) >= queues
            )

        wait_until(ready, timeout_s, f"the nameserver has no route for {topic} with {queues} queues")


def send(
    broker_addr: str, topic: str, bodies_by_queue: dict[int, list[bytes]], *, tags: str = "", batch: int = 256
) -> int:
    """Send bodies to the given queues of ``topic`` on one master; returns the number stored."""
    stored = 0
    with _channel(broker_addr) as ch:
        stub = broker_pb2_grpc.MessagingStub(ch)
        for qid, bodies in bodies_by_queue.items():
            for i in range(0, len(bodies), batch):
                msgs = [
                    broker_pb2.Message(
                        body=b, properties={"TAGS": tags} if tags else {}, born_timestamp=int(time.time() * 1000)
                    )
                    for b in bodies[i : i + batch]
                ]
                resp = stub.SendMessage(
                    broker_pb2.SendMessageRequest(
                        producer_group="spark-tests",
                        topic=topic,
                        queue_id=qid,
                        messages=msgs,
                        born_host="127.0.0.1:1",
                    ),
                    timeout=30,
                )
                assert resp.code in SEND_OK_CODES, resp.remark
                stored += len(msgs)
    return stored


def read_topic(broker_addr: str, topic: str, queues: int) -> list[StoredMessage]:
    """Every message of ``topic`` on one broker, queue by queue."""
    out: list[StoredMessage] = []
    with _channel(broker_addr) as ch:
        stub = broker_pb2_grpc.MessagingStub(ch)
        for qid in range(queues):
            offset = 0
            while True:
                resp = stub.PullMessage(
                    broker_pb2.PullMessageRequest(
                        consumer_group="spark-tests-check",
                        topic=topic,
                        queue_id=qid,
                        queue_offset=offset,
                        max_msg_nums=1024,
                        subscription="*",
                    ),
                    timeout=10,
                )
                if resp.code != ResponseCode.SUCCESS:
                    break
                out.extend(iter_records(resp.records))
                offset = resp.next_begin_offset
    return out


def queue_max(broker_addr: str, topic: str, queue_id: int) -> int:
    with _channel(broker_addr) as ch:
        resp = broker_pb2_grpc.MessagingStub(ch).GetQueueOffsets(
            broker_pb2.GetQueueOffsetsRequest(topic=topic, queue_id=queue_id), timeout=10
        )
    return resp.max_offset
