"""Heartbeat, UnregisterClient, GetConsumerIdList (RocketMQ ClientManageProcessor).

A consumer heartbeat also makes sure the group and its ``%RETRY%<group>`` topic exist (RocketMQ creates the retry
topic here too), so a consumer can subscribe to its retry topic before anything was ever sent back.
"""

from __future__ import annotations

from broker.grpc import validate
from broker.context import BrokerContext
from remoting.codes import ResponseCode
from remoting.pb import broker_pb2, common_pb2

MAX_CONSUMER_GROUPS_PER_HEARTBEAT = 256


async def heartbeat(ctx: BrokerContext, req: broker_pb2.HeartbeatRequest) -> common_pb2.Ack:
    if not req.client_id:
        return common_pb2.Ack(code=int(ResponseCode.INVALID_PARAMETER), remark="client_id is empty; set a client id")
    if len(req.consumers) > MAX_CONSUMER_GROUPS_PER_HEARTBEAT:
        return common_pb2.Ack(
            code=int(ResponseCode.INVALID_PARAMETER),
            remark=f"{len(req.consumers)} consumer groups in one heartbeat; the limit is {MAX_CONSUMER_GROUPS_PER_HEARTBEAT}",
        )
    topics_created = groups_created = False
    for consumer in req.consumers:
        bad = validate.group_name(consumer.group_name)
        if bad:
            return common_pb2.Ack(code=int(bad.code), remark=bad.remark)
        group = ctx.groups.get(consumer.group_name)
        if group is None:
            group = ctx.groups.find_or_create(consumer.group_name)
            groups_created |= group is not None
        if group is not None and not ctx.is_slave:
            _, created = ctx.topics.create_retry_topic(consumer.group_name, group.retry_queue_nums)
            topics_created |= created
        ctx.clients.consumer_heartbeat(
            req.client_id,
            consumer.group_name,
            consume_type=consumer.consume_type,
            message_model=consumer.message_model,
            consume_from_where=consumer.consume_from_where,
            subscriptions=((s.topic, s.sub_string) for s in consumer.subscriptions),
        )
    for group_name in req.producer_groups:
        ctx.clients.producer_heartbeat(req.client_id, group_name)
    if groups_created:
        ctx.groups_changed()
    if topics_created:
        ctx.topics_changed()
    return common_pb2.Ack(code=int(ResponseCode.SUCCESS))


async def unregister(ctx: BrokerContext, req: broker_pb2.UnregisterClientRequest) -> common_pb2.Ack:
    if not req.client_id:
        return common_pb2.Ack(code=int(ResponseCode.INVALID_PARAMETER), remark="client_id is empty; set a client id")
    ctx.clients.unregister(req.client_id, consumer_group=req.consumer_group, producer_group=req.producer_group)
    return common_pb2.Ack(code=int(ResponseCode.SUCCESS))


async def consumer_ids(
    ctx: BrokerContext, req: broker_pb2.GetConsumerIdListRequest
) -> broker_pb2.GetConsumerIdListResponse:
    bad = validate.group_name(req.consumer_group)
    if bad:
        return broker_pb2.GetConsumerIdListResponse(code=int(bad.code), remark=bad.remark)
    ids = ctx.clients.consumer_ids(req.consumer_group)
    if not ids:
        return broker_pb2.GetConsumerIdListResponse(
            code=int(ResponseCode.SUCCESS), remark=f"no live consumer in group {req.consumer_group}"
        )
    return broker_pb2.GetConsumerIdListResponse(code=int(ResponseCode.SUCCESS), consumer_ids=ids)
