"""Admin: topics (UpdateAndCreateTopic 17, DeleteTopic, GetAllTopicConfig 21, GetTopicStats).

Writes are refused on a slave (it copies the master's table; spec §1.4, "modify on the master"). A change is
persisted and followed by an immediate registration so routes show it at once (spec §2.3).
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.grpc import convert
from broker.metadata.topics import perm_valid
from broker.processors import validate
from remoting.codes import ResponseCode
from remoting.pb import admin_pb2, common_pb2


def _slave_refusal(ctx: BrokerContext) -> common_pb2.Ack | None:
    if ctx.is_slave:
        return common_pb2.Ack(code=int(ResponseCode.SYSTEM_ERROR), remark=ctx.slave_refusal("modify on the master"))
    return None


async def update(ctx: BrokerContext, req: common_pb2.TopicConfig) -> common_pb2.Ack:
    refused = _slave_refusal(ctx)
    if refused:
        return refused
    bad = validate.admin_topic(req.topic_name) or validate.queue_nums(req.read_queue_nums, req.write_queue_nums)
    if bad:
        return common_pb2.Ack(code=int(bad.code), remark=bad.remark)
    if not perm_valid(req.perm):
        return common_pb2.Ack(
            code=int(ResponseCode.INVALID_PARAMETER), remark=f"perm {req.perm} is invalid; use 2 (W), 4 (R) or 6 (RW)"
        )
    ctx.topics.update(convert.topic_config_from_pb(req))
    await ctx.topics.persist()
    ctx.register_now()
    return common_pb2.Ack(code=int(ResponseCode.SUCCESS), remark=f"topic {req.topic_name} saved on {ctx.broker_name}")


async def delete(ctx: BrokerContext, req: admin_pb2.DeleteTopicRequest) -> common_pb2.Ack:
    refused = _slave_refusal(ctx)
    if refused:
        return refused
    bad = validate.admin_topic(req.topic)
    if bad:
        return common_pb2.Ack(code=int(bad.code), remark=bad.remark)
    existed = ctx.topics.delete(req.topic)
    ctx.store.delete_topic(req.topic)
    dropped = ctx.offsets.remove_topic(req.topic)
    await ctx.topics.persist()
    await ctx.offsets.persist()
    ctx.register_now()
    if not existed:
        return common_pb2.Ack(
            code=int(ResponseCode.TOPIC_NOT_EXIST), remark=f"topic {req.topic} does not exist on {ctx.broker_name}"
        )
    return common_pb2.Ack(
        code=int(ResponseCode.SUCCESS), remark=f"topic {req.topic} deleted with {dropped} consumer offset entries"
    )


async def get_all(ctx: BrokerContext, req: admin_pb2.Empty) -> admin_pb2.AllTopicConfig:
    configs, version = ctx.topics.snapshot()
    return admin_pb2.AllTopicConfig(
        code=int(ResponseCode.SUCCESS),
        data_version=convert.data_version_pb(version),
        topic_configs=[convert.topic_config_pb(c) for c in configs],
    )


async def stats(ctx: BrokerContext, req: admin_pb2.GetTopicStatsRequest) -> admin_pb2.TopicStats:
    cfg = ctx.topics.get(req.topic)
    if cfg is None:
        return admin_pb2.TopicStats(
            code=int(ResponseCode.TOPIC_NOT_EXIST), remark=f"topic {req.topic} does not exist on {ctx.broker_name}"
        )
    store = ctx.store
    queues = []
    for qid in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
        lo = store.min_offset_in_queue(req.topic, qid)
        hi = store.max_offset_in_queue(req.topic, qid)
        last = store.store_timestamp_at(req.topic, qid, hi - 1) if hi > lo else 0
        queues.append(admin_pb2.QueueStat(queue_id=qid, min_offset=lo, max_offset=hi, last_update_timestamp=last or 0))
    return admin_pb2.TopicStats(code=int(ResponseCode.SUCCESS), broker_name=ctx.broker_name, queues=queues)
