"""Consumer offsets and queue offsets: QueryConsumerOffset, UpdateConsumerOffset, GetQueueOffsets,
SearchOffsetByTime, ViewMessage (RocketMQ ConsumerManageProcessor / QueryMessageProcessor, spec §6.1).

UpdateConsumerOffset has no role check: a slave accepts commits while its master is down (spec §6.1), and the
monotonic merge of the metadata sync carries them back to the master.
"""

from __future__ import annotations

from broker.grpc import validate
from broker.context import BrokerContext
from remoting.codes import ResponseCode
from remoting.pb import broker_pb2, common_pb2


def _names(group: str, topic: str) -> validate.Rejection | None:
    return validate.group_name(group) or validate.topic_name(topic)


async def query(
    ctx: BrokerContext, req: broker_pb2.QueryConsumerOffsetRequest
) -> broker_pb2.QueryConsumerOffsetResponse:
    bad = _names(req.consumer_group, req.topic)
    if bad:
        return broker_pb2.QueryConsumerOffsetResponse(code=int(bad.code), remark=bad.remark)
    offset = ctx.offsets.query(req.consumer_group, req.topic, req.queue_id)
    if offset is not None:
        return broker_pb2.QueryConsumerOffsetResponse(code=int(ResponseCode.SUCCESS), offset=offset)
    if ctx.store.min_offset_in_queue(req.topic, req.queue_id) <= 0:
        # Nothing committed and the queue still starts at 0: consuming from 0 loses nothing (spec §6.1).
        return broker_pb2.QueryConsumerOffsetResponse(
            code=int(ResponseCode.SUCCESS), offset=0, remark="no committed offset; the queue starts at 0"
        )
    return broker_pb2.QueryConsumerOffsetResponse(
        code=int(ResponseCode.QUERY_NOT_FOUND),
        remark=f"group {req.consumer_group} has no committed offset for {req.topic} queue {req.queue_id};"
        " start from consumeFromWhere",
    )


async def update(ctx: BrokerContext, req: broker_pb2.UpdateConsumerOffsetRequest) -> common_pb2.Ack:
    bad = _names(req.consumer_group, req.topic)
    if bad:
        return common_pb2.Ack(code=int(bad.code), remark=bad.remark)
    if req.queue_id < 0 or req.commit_offset < 0:
        return common_pb2.Ack(
            code=int(ResponseCode.INVALID_PARAMETER),
            remark=f"queue_id {req.queue_id} and commit_offset {req.commit_offset} must not be negative",
        )
    ctx.offsets.commit(req.consumer_group, req.topic, req.queue_id, req.commit_offset)
    return common_pb2.Ack(code=int(ResponseCode.SUCCESS))


async def queue_offsets(
    ctx: BrokerContext, req: broker_pb2.GetQueueOffsetsRequest
) -> broker_pb2.GetQueueOffsetsResponse:
    bad = validate.topic_name(req.topic)
    if bad:
        return broker_pb2.GetQueueOffsetsResponse(code=int(bad.code), remark=bad.remark)
    lo = ctx.store.min_offset_in_queue(req.topic, req.queue_id)
    hi = ctx.store.max_offset_in_queue(req.topic, req.queue_id)
    last = ctx.store.store_timestamp_at(req.topic, req.queue_id, hi - 1) if hi > lo else 0
    return broker_pb2.GetQueueOffsetsResponse(
        code=int(ResponseCode.SUCCESS), min_offset=lo, max_offset=hi, last_store_timestamp=last or 0
    )


async def search_by_time(
    ctx: BrokerContext, req: broker_pb2.SearchOffsetByTimeRequest
) -> broker_pb2.SearchOffsetByTimeResponse:
    bad = validate.topic_name(req.topic)
    if bad:
        return broker_pb2.SearchOffsetByTimeResponse(code=int(bad.code), remark=bad.remark)
    offset = ctx.store.offset_by_time(req.topic, req.queue_id, req.timestamp)
    return broker_pb2.SearchOffsetByTimeResponse(code=int(ResponseCode.SUCCESS), offset=offset)


async def view(ctx: BrokerContext, req: broker_pb2.ViewMessageRequest) -> broker_pb2.ViewMessageResponse:
    record = ctx.store.read_record(req.physical_offset) if req.physical_offset >= 0 else None
    if record is None:
        return broker_pb2.ViewMessageResponse(
            code=int(ResponseCode.QUERY_NOT_FOUND),
            remark=f"no message at commitlog offset {req.physical_offset} on broker {ctx.broker_name}"
            " (expired, or not a record start)",
        )
    return broker_pb2.ViewMessageResponse(code=int(ResponseCode.SUCCESS), record=record)
