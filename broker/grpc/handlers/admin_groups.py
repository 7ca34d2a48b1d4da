"""Admin: subscription groups and consume progress (UpdateAndCreateSubscriptionGroup 200, DeleteSubscriptionGroup,
GetAllSubscriptionGroupConfig 201, GetAllConsumerOffset 43, GetAllDelayOffset 45, GetConsumeStats 208).

The ``GetAll*`` answers are what a slave's metadata sync copies; they answer SUCCESS with an empty table instead
of RocketMQ's SYSTEM_ERROR so an empty master is not mistaken for a broken one.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.grpc import convert
from broker.metadata.topics import retry_topic
from broker.processors import validate
from remoting.codes import ResponseCode
from remoting.pb import admin_pb2, common_pb2


async def update(ctx: BrokerContext, req: admin_pb2.SubscriptionGroupConfig) -> common_pb2.Ack:
    if ctx.is_slave:
        return common_pb2.Ack(code=int(ResponseCode.SYSTEM_ERROR), remark=ctx.slave_refusal("modify on the master"))
    bad = validate.group_name(req.group_name)
    if bad:
        return common_pb2.Ack(code=int(bad.code), remark=bad.remark)
    if not 1 <= req.retry_queue_nums <= validate.MAX_QUEUE_NUMS or req.retry_max_times < 0 or req.broker_id < 0:
        return common_pb2.Ack(
            code=int(ResponseCode.INVALID_PARAMETER),
            remark="retry_queue_nums must be 1..1024, retry_max_times and broker_id must not be negative;"
            " send the whole config (fields left out are not defaults here)",
        )
    ctx.groups.update(convert.group_config_from_pb(req))
    await ctx.groups.persist()
    return common_pb2.Ack(code=int(ResponseCode.SUCCESS), remark=f"group {req.group_name} saved on {ctx.broker_name}")


async def delete(ctx: BrokerContext, req: admin_pb2.DeleteSubscriptionGroupRequest) -> common_pb2.Ack:
    if ctx.is_slave:
        return common_pb2.Ack(code=int(ResponseCode.SYSTEM_ERROR), remark=ctx.slave_refusal("modify on the master"))
    bad = validate.group_name(req.group_name)
    if bad:
        return common_pb2.Ack(code=int(bad.code), remark=bad.remark)
    existed = ctx.groups.delete(req.group_name)
    dropped = ctx.offsets.remove_group(req.group_name) if req.remove_offset else 0
    await ctx.groups.persist()
    await ctx.offsets.persist()
    if not existed:
        return common_pb2.Ack(
            code=int(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST),
            remark=f"group {req.group_name} does not exist on {ctx.broker_name}",
        )
    return common_pb2.Ack(code=int(ResponseCode.SUCCESS), remark=f"group deleted with {dropped} offset entries")


async def get_all(ctx: BrokerContext, req: admin_pb2.Empty) -> admin_pb2.AllSubscriptionGroupConfig:
    groups, version = ctx.groups.snapshot()
    return admin_pb2.AllSubscriptionGroupConfig(
        code=int(ResponseCode.SUCCESS),
        data_version=convert.data_version_pb(version),
        groups=[convert.group_config_pb(g) for g in groups],
    )


async def all_consumer_offsets(ctx: BrokerContext, req: admin_pb2.Empty) -> admin_pb2.AllConsumerOffset:
    table, versions = ctx.offsets.snapshot()
    return admin_pb2.AllConsumerOffset(
        code=int(ResponseCode.SUCCESS),
        offset_table={
            key: admin_pb2.QueueOffsets(offsets=queues, reset_version=versions.get(key, 0))
            for key, queues in table.items()
        },
    )


async def all_delay_offsets(ctx: BrokerContext, req: admin_pb2.Empty) -> admin_pb2.AllDelayOffset:
    return admin_pb2.AllDelayOffset(code=int(ResponseCode.SUCCESS), offset_table=ctx.delay_offsets.snapshot())


async def consume_stats(ctx: BrokerContext, req: admin_pb2.GetConsumeStatsRequest) -> admin_pb2.ConsumeStats:
    bad = validate.group_name(req.consumer_group)
    if bad:
        return admin_pb2.ConsumeStats(code=int(bad.code), remark=bad.remark)
    group = req.consumer_group
    if req.topic:
        topics = [req.topic]
    else:
        topics = ctx.offsets.topics_of_group(group)
        if retry_topic(group) in ctx.topics and retry_topic(group) not in topics:
            topics.append(retry_topic(group))
    store = ctx.store
    queues = []
    for topic in topics:
        cfg = ctx.topics.get(topic)
        if cfg is None:
            continue
        committed = ctx.offsets.queues_of(group, topic)
        for qid in range(cfg.read_queue_nums):
            consumer_offset = committed.get(qid, 0)
            last = store.store_timestamp_at(topic, qid, consumer_offset - 1) if consumer_offset > 0 else 0
            queues.append(
                admin_pb2.QueueConsumeStat(
                    topic=topic,
                    broker_name=ctx.broker_name,
                    queue_id=qid,
                    broker_offset=store.max_offset_in_queue(topic, qid),
                    consumer_offset=consumer_offset,
                    last_timestamp=last or 0,
                )
            )
    if not queues:
        return admin_pb2.ConsumeStats(
            code=int(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST if ctx.groups.get(group) is None else ResponseCode.SUCCESS
            ),
            remark=f"group {group} has no consume progress on {ctx.broker_name}",
        )
    return admin_pb2.ConsumeStats(code=int(ResponseCode.SUCCESS), queues=queues)
