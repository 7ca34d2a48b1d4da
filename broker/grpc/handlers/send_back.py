"""ConsumerSendMsgBack: validate, hand to ``broker.retry.RetryService``, answer with the put's code."""

from __future__ import annotations

from broker.grpc import validate
from broker.context import BrokerContext
from broker.retry import SendBackRequest
from remoting.codes import SEND_OK_CODES, ResponseCode
from remoting.message_codec import DLQ_GROUP_TOPIC_PREFIX
from remoting.pb import broker_pb2, common_pb2


async def handle(ctx: BrokerContext, req: broker_pb2.ConsumerSendMsgBackRequest) -> common_pb2.Ack:
    if ctx.is_slave:
        return common_pb2.Ack(
            code=int(ResponseCode.SERVICE_NOT_AVAILABLE), remark=ctx.slave_refusal("send back to the master")
        )
    bad = validate.group_name(req.consumer_group)
    if bad:
        return common_pb2.Ack(code=int(bad.code), remark=bad.remark)
    result, topics_changed = await ctx.retry.send_back(
        SendBackRequest(
            group=req.consumer_group,
            physical_offset=req.physical_offset,
            delay_level=req.delay_level,
            original_topic=req.original_topic,
            original_msg_id=req.original_msg_id,
            max_reconsume_times=req.max_reconsume_times,
        )
    )
    if topics_changed:
        ctx.topics_changed()
    if ctx.metrics is not None and result.code in SEND_OK_CODES:
        ctx.metrics.on_send_back(
            req.original_topic or result.topic,
            req.consumer_group,
            to_dlq=result.topic.startswith(DLQ_GROUP_TOPIC_PREFIX),
        )
    return common_pb2.Ack(code=int(result.code), remark=result.remark)
