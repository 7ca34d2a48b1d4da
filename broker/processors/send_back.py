"""CONSUMER_SEND_MSG_BACK (36): a message the consumer failed to process goes to ``%RETRY%<group>`` through the
delay levels, or to ``%DLQ%<group>`` after too many reconsumes (RocketMQ SendMessageProcessor#consumerSendMsgBack;
spec remoting.md §2.2). The work is ``broker.retry.RetryService``; this module reads the header and answers.

Header: ``offset`` (commitlog offset of the failed message), ``group``, ``delayLevel`` (0: the broker uses
3 + reconsumeTimes; < 0: straight to the DLQ), optional ``originMsgId``, ``originTopic``, ``maxReconsumeTimes``
(0 or absent: the group's ``retryMaxTimes``). A slave refuses (14): send-back goes to the master.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.processors import validate
from broker.processors.status_map import put_code
from broker.retry import SendBackRequest, SendBackResult
from remoting.codes import SEND_OK_CODES, RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields


async def _send_back(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    f = Fields(request.ext, "CONSUMER_SEND_MSG_BACK")
    offset = f.req_long("offset")
    group = f.req_str("group")
    delay_level = f.int("delayLevel", 0) or 0
    origin_topic = f.str("originTopic", "") or ""
    origin_msg_id = f.str("originMsgId", "") or ""
    max_times = f.int("maxReconsumeTimes", 0) or 0
    if ctx.is_slave:
        return response_to(request, ResponseCode.SERVICE_NOT_AVAILABLE, ctx.slave_refusal("send back to the master"))
    bad = validate.group_name(group)
    if bad:
        return response_to(request, bad.code, bad.remark)
    result, topics_changed = await ctx.retry.send_back(
        SendBackRequest(
            group=group,
            physical_offset=offset,
            delay_level=delay_level,
            original_topic=origin_topic,
            original_msg_id=origin_msg_id,
            max_reconsume_times=max(0, max_times),
        )
    )
    if topics_changed:
        ctx.topics_changed()
    code, remark = answer(result, group)
    if ctx.metrics is not None and code in SEND_OK_CODES:
        ctx.metrics.on_send_back(origin_topic or result.topic, group, to_dlq=result.to_dlq)
    return response_to(request, code, remark or None)


def answer(result: SendBackResult, group: str) -> tuple[ResponseCode, str]:
    """The response code and remark of a send-back (the retry service speaks in store terms)."""
    if result.group_missing:
        return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, result.group_missing
    if result.refusal is not None:
        return result.refusal.code, result.refusal.remark
    assert result.put is not None
    code, remark = put_code(result.put.status, result.put.remark)
    if result.to_dlq and result.put.status.stored:
        remark = remark or (f"reconsumed {result.reconsume_times - 1} times (max {result.max_reconsume_times});"
                            f" moved to {result.topic}")
    return code, remark


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.CONSUMER_SEND_MSG_BACK, lambda conn, request: _send_back(ctx, conn, request))
