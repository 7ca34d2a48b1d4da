"""A small remoting client for driving a real broker in tests with raw RocketMQ requests (the SDK is tested on its
own): it builds the headers of spec remoting.md §3-§5 itself, so the tests see exactly what a RocketMQ client
would send and get back.

``BrokerClient.request(code, ext, body)`` sends anything (bad inputs included) and returns the response command;
the typed helpers (``send``, ``pull``, ``heartbeat``, offsets, admin) wrap it and decode the answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from remoting import fastjson
from remoting.acl_signature import signer
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.frame_codec import RemotingCommand
from remoting.message_codec import (
    StoredMessage,
    encode_batch,
    iter_records,
    parse_offset_msg_id,
    properties_to_string,
)
from remoting.message_headers import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    V2_KEYS,
    PullHeader,
    SendHeader,
)
from harness.procs import Broker

FLAG_COMMIT_OFFSET = PULL_COMMIT_OFFSET
FLAG_SUSPEND = PULL_SUSPEND
FLAG_SUBSCRIPTION = PULL_SUBSCRIPTION


@dataclass
class Message:
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0


def message(body: bytes, **props: str) -> Message:
    return Message(body, props)


def group_config(name: str, **overrides: Any) -> dict[str, Any]:
    """A SubscriptionGroupConfig body (RocketMQ 4.9.7 names) for UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""
    values: dict[str, Any] = {
        "groupName": name,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }
    values.update(overrides)
    return values


def _header_int(key: str) -> property:
    """A read-only attribute: header field ``key`` of the answer as an int (KeyError if the broker left it out)."""
    return property(lambda self: int(self.ext[key]))


@dataclass
class Answer:
    """A broker's response command, with its code, remark and header fields at hand."""

    command: RemotingCommand

    @property
    def code(self) -> int:
        return self.command.code

    @property
    def remark(self) -> str:
        return self.command.remark or ""

    @property
    def ext(self) -> dict[str, str]:
        return self.command.ext or {}


@dataclass
class Sent(Answer):
    """A send answer: the response command and its header fields (spec §3.6)."""

    queue_id = _header_int("queueId")
    queue_offset = _header_int("queueOffset")

    @property
    def msg_ids(self) -> list[str]:
        text = self.ext.get("msgId", "")
        return text.split(",") if text else []

    @property
    def physical_offset(self) -> int:
        return parse_offset_msg_id(self.msg_ids[0])[1]


@dataclass
class Pulled(Answer):
    messages: list[StoredMessage]

    next_begin_offset = _header_int("nextBeginOffset")
    min_offset = _header_int("minOffset")
    max_offset = _header_int("maxOffset")
    suggest_which_broker_id = _header_int("suggestWhichBrokerId")


def send_ext(
    topic: str,
    queue_id: int,
    *,
    code: int = RequestCode.SEND_MESSAGE_V2,
    properties: str = "",
    producer_group: str = "test-producer",
    default_topic_queue_nums: int = 4,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
    sys_flag: int = 0,
    flag: int = 0,
    dedup: bool = False,
) -> dict[str, str]:
    """The header of a send: V2 one-letter keys for 310/320, full names for 10."""
    header = SendHeader(
        producer_group=producer_group,
        topic=topic,
        default_topic_queue_nums=default_topic_queue_nums,
        queue_id=queue_id,
        sys_flag=sys_flag,
        flag=flag,
        properties=properties,
        reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times,
        batch=code == RequestCode.SEND_BATCH_MESSAGE,
        dedup=dedup,
    )
    ext = header.to_v2()
    if code == RequestCode.SEND_MESSAGE:
        ext = {V2_KEYS.get(k, k): v for k, v in ext.items()}
    return ext


def heartbeat_data(
    client_id: str,
    consumers: dict[str, dict[str, str]] | None = None,
    producers: list[str] = (),
    *,
    sub_version: int = 1,
    expression_type: str = "TAG",
) -> bytes:
    """HeartbeatData as a Java client sends it (CLUSTERING, ``expression_type`` expressions): ``consumers`` maps
    group -> {topic: expression}."""
    data = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": group,
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "codeSet": [],
                        "expressionType": expression_type,
                        "subString": expr,
                        "subVersion": sub_version,
                        "tagsSet": [],
                        "topic": topic,
                    }
                    for topic, expr in subs.items()
                ],
                "unitMode": False,
            }
            for group, subs in (consumers or {}).items()
        ],
        "producerDataSet": [{"groupName": g} for g in producers],
    }
    return fastjson.dumps(data)


class BrokerClient:
    def __init__(self, addr: str, local_host: str | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        """``credentials`` (access key, secret key) sign every request as ACL 2.0's users do; None sends unsigned."""
        self.addr = addr
        self.remoting = RemotingClient(name="test-client", local_host=local_host)
        if credentials is not None:
            self.remoting.signer = signer(*credentials)

    async def close(self) -> None:
        await self.remoting.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def request(
        self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", timeout: float = 10
    ) -> RemotingCommand:
        return await self.remoting.invoke(self.addr, RemotingCommand(code, ext=ext, body=body), timeout)

    async def oneway(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> None:
        await self.remoting.invoke_oneway(self.addr, RemotingCommand(code, ext=ext, body=body))

    # producer -----------------------------------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        queue_id: int,
        messages: list[Message],
        *,
        code: int | None = None,
        batch_properties: dict[str, str] | None = None,
        **header: Any,
    ) -> Sent:
        """One message -> SEND_MESSAGE_V2 (or ``code``); several (or code 320) -> SEND_BATCH_MESSAGE."""
        if code is None:
            code = RequestCode.SEND_MESSAGE_V2 if len(messages) == 1 else RequestCode.SEND_BATCH_MESSAGE
        if code == RequestCode.SEND_BATCH_MESSAGE:
            body = encode_batch([(m.flag, m.body, m.properties) for m in messages])
            props = properties_to_string(batch_properties if batch_properties is not None else {"WAIT": "true"})
            ext = send_ext(topic, queue_id, code=code, properties=props, **header)
        else:
            [m] = messages
            body = m.body
            ext = send_ext(topic, queue_id, code=code, properties=properties_to_string(m.properties), flag=m.flag,
                           **header)
        return Sent(await self.request(code, ext, body))

    # consumer -----------------------------------------------------------------------------------------------
    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        *,
        sys_flag: int = FLAG_SUBSCRIPTION,
        suspend_ms: int = 0,
        subscription: str | None = "*",
        commit_offset: int = 0,
        sub_version: int = 0,
        max_msg_bytes: int | None = None,
        timeout: float = 20,
        expression_type: str | None = None,
    ) -> Pulled:
        header = PullHeader(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=sys_flag,
            commit_offset=commit_offset,
            suspend_timeout_millis=suspend_ms,
            subscription=subscription,
            sub_version=sub_version,
            expression_type=expression_type or ("TAG" if subscription is not None else None),
            max_msg_bytes=max_msg_bytes,
        )
        resp = await self.request(RequestCode.PULL_MESSAGE, header.to_ext(), timeout=timeout)
        messages = list(iter_records(resp.body, check_crc=True)) if resp.code == 0 and resp.body else []
        return Pulled(resp, messages)

    async def pull_all(self, group: str, topic: str, queue_id: int, start: int = 0, **kw: Any) -> list[StoredMessage]:
        out: list[StoredMessage] = []
        offset = start
        for _ in range(100_000):
            got = await self.pull(group, topic, queue_id, offset, **kw)
            if got.code != 0:
                return out
            out.extend(got.messages)
            offset = got.next_begin_offset
        raise AssertionError("pull_all did not reach the end of the queue")

    async def heartbeat(
        self,
        client_id: str,
        consumers: dict[str, dict[str, str]] | None = None,
        producers: list[str] = (),
        *,
        sub_version: int = 1,
        expression_type: str = "TAG",
    ) -> RemotingCommand:
        """HEART_BEAT with HeartbeatData: ``consumers`` maps group -> {topic: expression}."""
        return await self.request(RequestCode.HEART_BEAT, body=heartbeat_data(
            client_id, consumers, producers, sub_version=sub_version, expression_type=expression_type))

    async def consumer_ids(self, group: str) -> RemotingCommand:
        return await self.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})

    async def query_offset(self, group: str, topic: str, queue_id: int) -> tuple[int, int | None]:
        resp = await self.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        )
        offset = (resp.ext or {}).get("offset")
        return resp.code, int(offset) if offset is not None else None

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
        return await self.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)},
        )

    async def send_back(
        self, group: str, offset: int, *, delay_level: int = 0, origin_topic: str = "", max_reconsume_times: int = 0
    ) -> RemotingCommand:
        ext = {"offset": str(offset), "group": group, "delayLevel": str(delay_level), "unitMode": "false"}
        if origin_topic:
            ext["originTopic"] = origin_topic
        if max_reconsume_times:
            ext["maxReconsumeTimes"] = str(max_reconsume_times)
        return await self.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)

    # admin (served by the admin processors) -------------------------------------------------------------------
    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> RemotingCommand:
        return await self.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": str(queues),
                "writeQueueNums": str(queues),
                "perm": str(perm),
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "false",
            },
        )

    async def create_group(self, config: dict[str, Any]) -> RemotingCommand:
        return await self.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=fastjson.dumps(config))

    async def topic_configs(self) -> dict[str, dict[str, Any]]:
        resp = await self.request(RequestCode.GET_ALL_TOPIC_CONFIG)
        assert resp.code == 0, resp.remark
        return fastjson.loads(resp.body)["topicConfigTable"]

    async def runtime_info(self) -> dict[str, str]:
        resp = await self.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        assert resp.code == 0, resp.remark
        return fastjson.loads(resp.body)["table"]


def make_broker(workdir: Path, **conf: object) -> Broker:
    """A broker process for these tests (real `python -m broker`, see harness/procs.py)."""
    return Broker(workdir, **conf)
