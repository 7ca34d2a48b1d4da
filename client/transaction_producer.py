"""TransactionProducer: RocketMQ's transactional producer (TransactionMQProducer) in asyncio.

``send_message_in_transaction(msg, local_transaction)`` sends a half message (SEND_MESSAGE_V2 with
``TRAN_MSG=true``, ``PGROUP`` and sysFlag PREPARED) to one master, runs ``local_transaction(msg, arg)`` (plain or
async), then tells the broker its outcome with END_TRANSACTION (37, oneway as in RocketMQ): COMMIT_MESSAGE makes
the message visible in its topic, ROLLBACK_MESSAGE drops it, UNKNOW (or an exception in the callback) leaves it to
the broker's check. The check arrives as CHECK_TRANSACTION_STATE (39) on the producer's connection: ``checker(msg)``
(the half message, with its real topic) answers, and the answer goes back as END_TRANSACTION with
``fromTransactionCheck=true``. So the broker can reach a live producer of the group, the producer heartbeats to
every master it sent a half to, before the first half and every ``heartbeat_interval_s``.

Each half is one request of its own (RocketMQ sends no half in a batch), so this producer has its own small send
path over the SDK's remoting client and route cache instead of the batching ``Producer``.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from client.errors import BrokerError, ClientStateError, MQClientError, NoRouteError
from client.heartbeat import heartbeat_body, new_client_id, send_heartbeats, unregister
from client.message import SEND_STATUS_BY_CODE, Message, MessageExt, MessageQueue, SendResult
from client.namesrv import NamesrvClient
from client.route_cache import RouteCache
from client.rpc import ClientRemoting, command
from common.service import Service
from remoting.codes import RequestCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand
from remoting.message_codec import decode, parse_offset_msg_id, properties_to_string, string_to_properties
from remoting.message_headers import SendHeader

log = logging.getLogger(__name__)

PREPARED = 0x1 << 2  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
COMMIT = 0x2 << 2
ROLLBACK = 0x3 << 2
MAX_CHECKS_IN_FLIGHT = 256  # checks beyond this wait for the broker's next round (RocketMQ's check thread pool)


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = COMMIT
    ROLLBACK_MESSAGE = ROLLBACK
    UNKNOW = 0  # RocketMQ's spelling


class TransactionSendResult(NamedTuple):
    send_result: SendResult
    state: LocalTransactionState
    transaction_id: str


LocalTransaction = Callable[[Message, Any], "LocalTransactionState | Awaitable[LocalTransactionState]"]
Checker = Callable[[MessageExt], "LocalTransactionState | Awaitable[LocalTransactionState]"]


async def _state(result: Any) -> LocalTransactionState:
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, LocalTransactionState):
        raise TypeError(f"a local transaction or checker returned {result!r}, not a LocalTransactionState")
    return result


def end_header(group: str, queue_offset: int, offset_msg_id: str, state: LocalTransactionState, msg_id: str,
               from_check: bool) -> dict[str, str]:
    """EndTransactionRequestHeader's fields."""
    _, phy = parse_offset_msg_id(offset_msg_id)
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(queue_offset),
        "commitLogOffset": str(phy),
        "commitOrRollback": str(state.value),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": msg_id,
        "transactionId": msg_id,
    }


class TransactionProducer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        checker: Checker | None = None,
        send_timeout_s: float = 5.0,
        heartbeat_interval_s: float = 30.0,
        default_topic_queue_nums: int = 4,
        instance_name: str | None = None,
        topics: tuple[str, ...] = (),
        credentials: tuple[str, str] | None = None,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str = "",
    ) -> None:
        self.group = group
        self.topics = tuple(topics)  # their masters get heartbeats from the start: checks of halves sent before
        # a restart of the application reach this producer before it sends anything
        self.checker = checker
        self.send_timeout_s = send_timeout_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.default_topic_queue_nums = default_topic_queue_nums
        self.client_id = new_client_id(instance_name)
        self.remoting = ClientRemoting(name=f"tx-producer.{group}", credentials=credentials,
                                      tls=tls, tls_ca=tls_ca)
        self.namesrv = NamesrvClient(namesrv_addr, remoting=self.remoting, timeout_s=send_timeout_s)
        self.routes = RouteCache(self.namesrv, self.remoting.health, default_topic_queue_nums=default_topic_queue_nums)
        self.remoting.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        self._svc = Service(f"tx-producer.{group}")
        self._brokers: set[str] = set()  # masters this producer sent halves to (heartbeat targets)
        self._next_queue: dict[str, int] = {}
        self._checks: set[asyncio.Task] = set()
        self._state = "created"
        self.checks_answered = 0

    # lifecycle ------------------------------------------------------------------------------------------------
    async def start(self) -> TransactionProducer:
        if self._state == "started":
            return self
        if self._state == "stopped":
            raise ClientStateError(f"transaction producer {self.group}", "stopped")
        self.routes.start()
        await self._svc.start()
        self._svc.run_every("heartbeat", self.heartbeat_interval_s, self._heartbeat)
        for topic in self.topics:
            try:
                await self.routes.get(topic)
            except MQClientError as exc:
                log.warning("transaction producer %s: no route for %s yet: %s", self.group, topic, exc)
        self._brokers |= self.routes.addrs_of(self.topics, masters_only=True)
        await self._heartbeat()
        self._state = "started"
        return self

    async def stop(self) -> None:
        if self._state != "started":
            self._state = "stopped"
            return
        self._state = "stopped"
        await self._svc.stop(timeout_s=1.0)
        for task in list(self._checks):
            task.cancel()
        await unregister(self.remoting, self._brokers, self.client_id, producer_group=self.group,
                         timeout_s=min(self.send_timeout_s, 1.0))
        await self.routes.stop()
        await self.remoting.close()

    async def __aenter__(self) -> TransactionProducer:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def _heartbeat(self) -> None:
        if self._brokers:
            body = heartbeat_body(self.client_id, producer_groups=[self.group])
            await send_heartbeats(self.remoting, self._brokers, body, self.send_timeout_s)

    # sending ----------------------------------------------------------------------------------------------------
    async def send_message_in_transaction(
        self, msg: Message, local_transaction: LocalTransaction, arg: Any = None
    ) -> TransactionSendResult:
        """Half, local transaction, END_TRANSACTION. Raises MQClientError when the half was not stored (the local
        transaction did not run then)."""
        if self._state != "started":
            raise ClientStateError(f"transaction producer {self.group}", self._state)
        result = await self.send_half(msg)
        try:
            state = await _state(local_transaction(msg, arg))
        except Exception:  # RocketMQ: the broker's check decides
            log.exception("local transaction of %s failed; the broker's check will ask the checker", msg.msg_id)
            state = LocalTransactionState.UNKNOW
        await self.end(result, state)
        return TransactionSendResult(result, state, result.msg_id)

    async def send_half(self, msg: Message) -> SendResult:
        """Store ``msg`` as a half message (invisible until END_TRANSACTION commits it)."""
        route = await self.routes.get(msg.topic, allow_default=True)
        queues = [q for q in route.publish_queues if self.routes.find_broker_address_in_publish(q.broker_name)]
        if not queues:
            raise NoRouteError(msg.topic, "no master broker serves the topic")
        start = self._next_queue.get(msg.topic, 0)
        last: MQClientError | None = None
        for attempt in range(min(len(queues), 3)):
            mq = queues[(start + attempt) % len(queues)]
            addr = self.routes.find_broker_address_in_publish(mq.broker_name)
            if not self.remoting.health.healthy(addr) and attempt + 1 < len(queues):
                continue
            self._next_queue[msg.topic] = (start + attempt + 1) % len(queues)
            try:
                return await self._send_half_to(addr, mq, msg)
            except MQClientError as exc:  # transport: the next queue; a refusal is final
                if isinstance(exc, BrokerError):
                    raise
                last = exc
        raise last or NoRouteError(msg.topic, "no healthy master broker serves the topic")

    async def _send_half_to(self, addr: str, mq: MessageQueue, msg: Message) -> SendResult:
        if addr not in self._brokers:  # the broker must know a live producer of the group before it checks
            self._brokers.add(addr)
            await send_heartbeats(self.remoting, [addr], heartbeat_body(self.client_id, producer_groups=[self.group]),
                                  self.send_timeout_s)
        props = string_to_properties(msg.wire_properties(int(time.time() * 1000)))
        props["TRAN_MSG"] = "true"
        props["PGROUP"] = self.group
        ext = SendHeader(
            producer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, sys_flag=PREPARED, flag=msg.flag,
            properties=properties_to_string(props), default_topic_queue_nums=self.default_topic_queue_nums,
            broker_name=mq.broker_name, timeout_millis=int(self.send_timeout_s * 1000),
        ).to_v2()
        request = command(RequestCode.SEND_MESSAGE_V2, ext, msg.body)
        response = await self.remoting.invoke(addr, request, self.send_timeout_s, "send half message")
        status = SEND_STATUS_BY_CODE.get(response.code)
        if status is None:
            raise BrokerError(response.code, response.remark or "", addr, request="send half message")
        rext = response.ext or {}
        queue_id = int(rext.get("queueId", mq.queue_id))
        return SendResult(status, msg.msg_id, rext.get("msgId", ""), MessageQueue(mq.topic, mq.broker_name, queue_id),
                          int(rext.get("queueOffset", -1)))

    async def end(self, result: SendResult, state: LocalTransactionState) -> bool:
        """END_TRANSACTION (oneway) for a half this producer sent; False when the connection failed (the broker's
        check will ask)."""
        addr = self.routes.find_broker_address_in_publish(result.message_queue.broker_name)
        if addr is None:
            return False
        ext = end_header(self.group, result.queue_offset, result.offset_msg_id, state, result.msg_id, False)
        return await self.remoting.oneway(addr, RequestCode.END_TRANSACTION, ext)

    # the broker's check ---------------------------------------------------------------------------------------------
    def _on_check(self, conn: Connection, request: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE (39, oneway): ask the checker in a task and answer with END_TRANSACTION."""
        if self.checker is None or len(self._checks) >= MAX_CHECKS_IN_FLIGHT or self._state != "started":
            return None
        task = asyncio.ensure_future(self._answer_check(conn, request))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None

    async def _answer_check(self, conn: Connection, request: RemotingCommand) -> None:
        ext = request.ext or {}
        try:
            msg = decode(request.body_bytes())
            state = await _state(self.checker(msg))
            end = end_header(self.group, int(ext["tranStateTableOffset"]), ext["offsetMsgId"], state,
                             ext.get("msgId") or msg.properties.get("UNIQ_KEY", ""), True)
            end["transactionId"] = ext.get("transactionId", end["transactionId"])
            answer = command(RequestCode.END_TRANSACTION, end)
            if self.remoting.client.signer is not None:  # on the broker's connection: sign as every request is
                self.remoting.client.signer(answer)
            conn.invoke_oneway(answer)
            self.checks_answered += 1
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the broker checks again next round
            log.exception("answering the broker's transaction check %s failed", ext.get("transactionId"))
