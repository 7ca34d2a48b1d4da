"""Blocking helpers for the Spark tier: create topics, send, read a whole topic back (checks on the broker).

They speak remoting through the SDK's AdminClient (its ClientRemoting for sends and pulls), on a private event
loop per call, independently of the connector under test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from client.admin import AdminClient
from remoting.codes import SEND_OK_CODES, RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from remoting.message_codec import StoredMessage, encode_batch, iter_records
from remoting.message_headers import PULL_SUBSCRIPTION, PullHeader, SendHeader
from harness.waiting import wait_until

T = TypeVar("T")


def with_admin(namesrv_addr: str, work: Callable[[AdminClient], Awaitable[T]], timeout_s: float = 10.0) -> T:
    async def run() -> T:
        async with AdminClient(namesrv_addr, timeout_s=timeout_s) as admin:
            return await work(admin)

    return asyncio.run(run())


def create_topic(broker_addr: str, namesrv_addr: str, topic: str, queues: int = 4) -> None:
    with_admin(
        "", lambda a: a.update_topic(broker_addr, topic, read_queue_nums=queues, write_queue_nums=queues, perm=6)
    )
    wait_route(namesrv_addr, topic, queues)


def wait_route(namesrv_addr: str, topic: str, queues: int, timeout_s: float = 20.0) -> None:
    def ready() -> bool:
        route = with_admin(namesrv_addr, lambda a: a.topic_route_raw(topic), timeout_s=5.0)
        return sum(int(q.get("readQueueNums", 0)) for q in route["queueDatas"]) >= queues

    wait_until(ready, timeout_s, f"the nameserver has no route for {topic} with {queues} queues")


def send(
    broker_addr: str, topic: str, bodies_by_queue: dict[int, list[bytes]], *, tags: str = "", batch: int = 256
) -> int:
    """Send bodies to the given queues of ``topic`` on one master (SEND_BATCH_MESSAGE); returns the number stored."""

    async def work(admin: AdminClient) -> int:
        stored = 0
        props = {"TAGS": tags} if tags else {}
        for qid, bodies in bodies_by_queue.items():
            for i in range(0, len(bodies), batch):
                chunk = bodies[i : i + batch]
                header = SendHeader(
                    producer_group="spark-tests",
                    topic=topic,
                    queue_id=qid,
                    batch=True,
                )
                request = RemotingCommand(
                    RequestCode.SEND_BATCH_MESSAGE, ext=header.to_v2(), body=encode_batch((0, b, props) for b in chunk)
                )
                resp = await admin.remoting.invoke(broker_addr, request, 30.0)
                assert resp.code in SEND_OK_CODES, resp.remark
                stored += len(chunk)
        return stored

    return with_admin("", work)


def read_topic(broker_addr: str, topic: str, queues: int) -> list[StoredMessage]:
    """Every message of ``topic`` on one broker, queue by queue (PULL_MESSAGE with the subscription "*")."""

    async def work(admin: AdminClient) -> list[StoredMessage]:
        out: list[StoredMessage] = []
        for qid in range(queues):
            offset = 0
            while True:
                header = PullHeader(
                    consumer_group="spark-tests-check",
                    topic=topic,
                    queue_id=qid,
                    queue_offset=offset,
                    max_msg_nums=1024,
                    sys_flag=PULL_SUBSCRIPTION,
                    subscription="*",
                    expression_type="TAG",
                )
                request = RemotingCommand(RequestCode.PULL_MESSAGE, ext=header.to_ext())
                resp = await admin.remoting.invoke(broker_addr, request, 10.0)
                if resp.code != ResponseCode.SUCCESS:
                    break
                out.extend(iter_records(resp.body_bytes()))
                offset = int(resp.ext["nextBeginOffset"])
        return out

    return with_admin("", work)


def queue_max(broker_addr: str, topic: str, queue_id: int) -> int:
    return with_admin("", lambda a: a.queue_offsets(broker_addr, topic, queue_id)).max_offset


def committed_offset(broker_addr: str, group: str, topic: str, queue_id: int) -> int:
    """QUERY_CONSUMER_OFFSET of one queue; -1 when the group has none there."""
    return with_admin("", lambda a: a.query_consumer_offset(broker_addr, group, topic, queue_id))


def topic_configs(broker_addr: str) -> set[str]:
    """The topic names the broker itself holds (GET_ALL_TOPIC_CONFIG)."""
    configs = with_admin("", lambda a: a.all_topic_configs(broker_addr), timeout_s=5.0)
    return {c.topic_name for c in configs.topic_configs}
