"""A RemotingServer fake that plays a nameserver and one broker group ``b`` (master only) on one port and
records every request, for unit tests of the SDK's wire shapes. It answers like RocketMQ's processors, in the
smallest way that lets a Producer or a PushConsumer run; it stores nothing but queue offsets and the records
a test hands it. Behaviour is tested against real processes in tests/integration/client/."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Self

from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.message_codec import decode_batch, encode_properties, host_bytes
from tests.stored_records import stored_record
from remoting.server import RemotingServer

PULL_HOLD_S = 0.2  # how long the fake holds a pull that finds nothing (a short long-poll)


class FakeCluster:
    """``topics`` maps a topic to its queue count (absent: 17 from the nameserver); ``send_code`` and
    ``send_back_code`` decide the response codes of sends and CONSUMER_SEND_MSG_BACK; ``records`` holds what
    pulls return per (topic, queueId), indexed by queue offset; ``max_offsets`` answers GET_MAX_OFFSET."""

    def __init__(self) -> None:
        self.server = RemotingServer("fake", "127.0.0.1", 0)
        self.addr = ""
        self.topics: dict[str, int] = {}
        self.requests: list[RemotingCommand] = []
        self.send_code: Callable[[RemotingCommand], int] = lambda _req: ResponseCode.SUCCESS
        self.send_back_code = ResponseCode.SUCCESS
        self.send_remark: str | None = None  # the remark of a stored-but-weak send answer (10, 11, 12)
        self.offsets: dict[tuple[str, int], int] = {}
        self.max_offsets: dict[tuple[str, int], int] = {}
        self.time_offsets: dict[tuple[str, int], int] = {}  # SEARCH_OFFSET_BY_TIMESTAMP's answer
        self.records: dict[tuple[str, int], dict[int, bytes]] = {}
        self.consumers: dict[str, set[str]] = {}  # group -> client ids (HEART_BEAT / UNREGISTER_CLIENT)
        self.client_conns: dict[str, Connection] = {}  # client id -> the connection its heartbeat came on
        for code in (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO):
            self.server.register(code, self._namesrv)
        for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            self.server.register(code, self._send)
        self.server.register(RequestCode.HEART_BEAT, self._heartbeat)
        self.server.register(RequestCode.UNREGISTER_CLIENT, self._unregister)
        self.server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self._consumer_list)
        self.server.register(RequestCode.QUERY_CONSUMER_OFFSET, self._record_and(ResponseCode.QUERY_NOT_FOUND))
        self.server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self._record_and(ResponseCode.SUCCESS))
        self.server.register(RequestCode.GET_MAX_OFFSET, self._max_offset)
        self.server.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self._max_offset)
        self.server.register(RequestCode.PULL_MESSAGE, self._pull)
        self.server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self._send_back)

    async def __aenter__(self) -> Self:
        self.addr = f"127.0.0.1:{await self.server.start()}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.server.stop(0.1)

    def of(self, code: int) -> list[RemotingCommand]:
        return [r for r in self.requests if r.code == code]

    def add_record(
        self, topic: str, queue_id: int, offset: int, body: bytes, *, sys_flag: int = 0, **props: str
    ) -> None:
        now = int(time.time() * 1000)
        self.records.setdefault((topic, queue_id), {})[offset] = stored_record(
            topic_bytes=topic.encode(), queue_id=queue_id, queue_offset=offset, physical_offset=1000 + offset,
            sys_flag=sys_flag, born_timestamp=now, born_host=host_bytes("127.0.0.1", 1), store_timestamp=now,
            body=body, properties=encode_properties(props),
        )

    # nameserver -----------------------------------------------------------------------------------------
    def _namesrv(self, conn, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        if request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            body = (
                b'{"brokerAddrTable":{"b":{"brokerAddrs":{0:"%s"},"brokerName":"b","cluster":"C"}},'
                % (self.addr.encode())
                + b'"clusterAddrTable":{"C":["b"]}}'
            )
            return response_to(request, ResponseCode.SUCCESS, body=body)
        topic = request.ext["topic"]
        if topic not in self.topics:
            return response_to(request, ResponseCode.TOPIC_NOT_EXIST, f"No topic route info for {topic}")
        n = self.topics[topic]
        # fastjson's dialect: a bare numeric key in brokerAddrs (what a Java namesrv answers old clients)
        body = (
            b'{"brokerDatas":[{"brokerAddrs":{0:"%s"},"brokerName":"b","cluster":"C"}],"filterServerTable":{},'
            b'"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":%d,"topicSysFlag":0,"writeQueueNums":%d}]}'
        ) % (self.addr.encode(), n, n)
        return response_to(request, ResponseCode.SUCCESS, body=body)

    # broker ---------------------------------------------------------------------------------------------
    def _record_and(self, code: int) -> Callable[[Connection, RemotingCommand], RemotingCommand]:
        def answer(conn, request: RemotingCommand) -> RemotingCommand:
            self.requests.append(request)
            return response_to(request, code, None if code == ResponseCode.SUCCESS else "fake: not found")

        return answer

    def _send(self, conn, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        code = self.send_code(request)
        if code not in (0, 10, 11, 12):
            return response_to(request, code, "refused by the fake")
        qid = int(request.ext["e"])
        n = len(decode_batch(request.body, 1000, 1 << 20)) if request.code == RequestCode.SEND_BATCH_MESSAGE else 1
        base = self.offsets.get((request.ext["b"], qid), 0)
        self.offsets[(request.ext["b"], qid)] = base + n
        ids = ",".join(f"{'0' * 16}{base + i:016X}" for i in range(n))
        ext = {"msgId": ids, "queueId": str(qid), "queueOffset": str(base), "MSG_REGION": "DefaultRegion"}
        return response_to(request, code, None if code == 0 else self.send_remark, ext=ext)

    def _heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        data = fastjson.loads(request.body)
        client_id = data["clientID"]
        self.client_conns[client_id] = conn
        for consumer in data["consumerDataSet"]:
            self.consumers.setdefault(consumer["groupName"], set()).add(client_id)
        return response_to(request, ResponseCode.SUCCESS)

    def _unregister(self, conn, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        group = request.ext.get("consumerGroup")
        if group:
            self.consumers.get(group, set()).discard(request.ext["clientID"])
        return response_to(request, ResponseCode.SUCCESS)

    def _consumer_list(self, conn, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        ids = sorted(self.consumers.get(request.ext["consumerGroup"], ()))
        return response_to(request, ResponseCode.SUCCESS, body=fastjson.dumps({"consumerIdList": ids}))

    def _max_offset(self, conn, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        table = self.time_offsets if request.code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP else self.max_offsets
        offset = table.get((request.ext["topic"], int(request.ext["queueId"])), 0)
        return response_to(request, ResponseCode.SUCCESS, ext={"offset": str(offset)})

    async def _pull(self, conn, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        ext = request.ext
        key = (ext["topic"], int(ext["queueId"]))
        offset = int(ext["queueOffset"])
        found = self.records.get(key, {}).get(offset)
        if found is None:
            await asyncio.sleep(PULL_HOLD_S)
            head = {"nextBeginOffset": str(offset), "minOffset": "0", "maxOffset": str(offset)}
            return response_to(
                request, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", ext=head | {"suggestWhichBrokerId": "0"}
            )
        head = {"nextBeginOffset": str(offset + 1), "minOffset": "0", "maxOffset": str(offset + 1)}
        return response_to(request, ResponseCode.SUCCESS, "FOUND", ext=head | {"suggestWhichBrokerId": "0"}, body=found)

    def _send_back(self, conn, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        code = self.send_back_code
        return response_to(request, code, None if code == ResponseCode.SUCCESS else "fake: send-back refused")

    def notify_consumer_ids_changed(self, group: str) -> None:
        """What a broker does when a member joins or leaves: a oneway 40 to every member's connection."""
        for client_id in self.consumers.get(group, ()):
            conn = self.client_conns.get(client_id)
            if conn is not None and conn.is_open:
                conn.invoke_oneway(
                    RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext={"consumerGroup": group})
                )
