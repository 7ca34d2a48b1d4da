"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): orderly consumers lock their queues on the master (RocketMQ
AdminBrokerProcessor#lockBatchMQ / #unlockBatchMQ; spec remoting.md §2.3).

No header; the body is ``{"clientId":S,"consumerGroup":S,"mqSet":[{"brokerName":S,"queueId":I,"topic":S}...]}``.
LOCK answers ``{"lockOKMQSet":[...]}`` with the queues now held by the client (new, renewed, or taken over after
the previous holder's 60 s lease ran out, ``broker.rebalance_lock``); UNLOCK releases the client's own locks and
may come oneway. ``onlyThisBroker`` (5.x) changes nothing here: pyrmq brokers never forward lock requests.
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from broker.processors import validate
from broker.rebalance_lock import MessageQueue
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to

MAX_QUEUES_PER_REQUEST = 65536


class _BadBody(ValueError):
    pass


def _mq(raw: Any) -> MessageQueue:
    if isinstance(raw, fastjson.FrozenObject):
        raw = raw.dict()
    if not isinstance(raw, dict):
        raise _BadBody(f"an mqSet entry is a {type(raw).__name__}, not a MessageQueue object")
    topic, broker_name, queue_id = raw.get("topic"), raw.get("brokerName"), raw.get("queueId")
    if not isinstance(topic, str) or not isinstance(broker_name, str):
        raise _BadBody("a MessageQueue needs string topic and brokerName")
    if isinstance(queue_id, bool) or not isinstance(queue_id, int):
        raise _BadBody(f"a MessageQueue needs an integer queueId, got {queue_id!r}")
    return MessageQueue(topic, broker_name, queue_id)


def _body(request: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
    try:
        data = fastjson.loads(request.body_bytes())
    except (fastjson.JsonBodyError, ValueError) as exc:
        raise _BadBody(f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _BadBody("the body is not a JSON object")
    client_id, group, mq_set = data.get("clientId"), data.get("consumerGroup"), data.get("mqSet") or []
    if not isinstance(client_id, str) or not client_id:
        raise _BadBody("clientId is missing")
    if not isinstance(group, str):
        raise _BadBody("consumerGroup is missing")
    if not isinstance(mq_set, list) or len(mq_set) > MAX_QUEUES_PER_REQUEST:
        raise _BadBody(f"mqSet must be an array of at most {MAX_QUEUES_PER_REQUEST} MessageQueues")
    return client_id, group, [_mq(m) for m in mq_set]


def _as_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def _parsed(request: RemotingCommand, what: str) -> tuple[str, str, list[MessageQueue]] | RemotingCommand:
    try:
        client_id, group, mqs = _body(request)
    except _BadBody as exc:
        return response_to(
            request,
            ResponseCode.INVALID_PARAMETER,
            f"{what} body is not LockBatchRequestBody JSON: {exc}; send"
            ' {"clientId":..,"consumerGroup":..,"mqSet":[{"brokerName":..,"queueId":..,"topic":..}]}',
        )
    bad = validate.group_name(group)
    if bad:
        return response_to(request, bad.code, bad.remark)
    return client_id, group, mqs


def _lock(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    parsed = _parsed(request, "LOCK_BATCH_MQ")
    if isinstance(parsed, RemotingCommand):
        return parsed
    client_id, group, mqs = parsed
    locked = ctx.locks.try_lock(group, client_id, mqs)
    body = fastjson.dumps({"lockOKMQSet": [_as_json(mq) for mq in locked]})
    return response_to(request, ResponseCode.SUCCESS, body=body)


def _unlock(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    parsed = _parsed(request, "UNLOCK_BATCH_MQ")
    if isinstance(parsed, RemotingCommand):
        return parsed
    client_id, group, mqs = parsed
    ctx.locks.unlock(group, client_id, mqs)
    return response_to(request, ResponseCode.SUCCESS)


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.LOCK_BATCH_MQ, lambda conn, request: _lock(ctx, conn, request))
    server.register(RequestCode.UNLOCK_BATCH_MQ, lambda conn, request: _unlock(ctx, conn, request))
