"""Where a send may go: the checks SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE make before any message
is looked at (RocketMQ AbstractSendMessageProcessor#msgCheck and SendMessageProcessor#handleRetryTopic, spec
remoting.md §3.2).

Order: role (a slave never takes writes), broker permission, transactions (a half message needs the master's
transaction service and no ``rejectTransactionMessage``; no half in a batch), then the topic:

- ``%RETRY%<group>`` (a consumer's fallback when CONSUMER_SEND_MSG_BACK failed): the group must exist
  (auto-created when allowed, else 26), its retry topic is created if missing, and a message whose
  ``reconsumeTimes`` reached the group's ``retryMaxTimes`` (or the header's ``maxReconsumeTimes``) goes to
  ``%DLQ%<group>`` instead, without its DELAY;
- any other topic: a valid name, not a system topic, not a DLQ; an unknown topic is created from the
  ``defaultTopic`` template (TBW102) when the template has the INHERIT bit (``autoCreateTopicEnable``), with
  ``min(defaultTopicQueueNums, template queues)`` queues, else 17;
- topic permission, then the queue id: < 0 lets the broker pick a writable queue (RocketMQ's random choice),
  past the write queues is refused.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from broker.context import BrokerContext
from broker.processors import validate
from common.perm import PERM_INHERIT, PERM_READ, PERM_WRITE, perm_text, perm_writeable
from remoting.codes import ResponseCode
from broker.transaction.records import is_half_send
from remoting.message_codec import RETRY_GROUP_TOPIC_PREFIX, string_to_properties
from remoting.message_headers import DEFAULT_TOPIC, SendHeader
from remoting.topic_config import TopicConfig

TX_MASK = 0xC  # MessageSysFlag transaction bits
TRAN_MSG_KEY = "TRAN_MSG\x01"


class Target(NamedTuple):
    topic: str
    queue_id: int
    config: TopicConfig
    to_dlq: bool  # a %RETRY% message over its max reconsumes, redirected to the group's DLQ


class Refusal(NamedTuple):
    code: int
    remark: str


def admit(ctx: BrokerContext, h: SendHeader) -> Target | Refusal:
    broker = ctx.settings.broker
    if ctx.is_slave:
        return Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, ctx.slave_refusal("send to the master"))
    if not perm_writeable(broker.broker_permission):
        return Refusal(
            ResponseCode.NO_PERMISSION,
            f"broker {ctx.broker_name} is not writable (brokerPermission={broker.broker_permission});"
            " send to another broker",
        )
    if h.sys_flag & TX_MASK or TRAN_MSG_KEY in h.properties:
        refused = _admit_transaction(ctx, h)
        if refused is not None:
            return refused
    if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return _admit_retry(ctx, h)
    bad = validate.send_topic(h.topic)
    if bad:
        return Refusal(bad.code, bad.remark)
    cfg = ctx.topics.get(h.topic)
    if cfg is None:
        created = _auto_create(ctx, h)
        if isinstance(created, Refusal):
            return created
        cfg = created
    return _queue(h, cfg, h.topic, to_dlq=False)


def half_send(h: SendHeader) -> bool:
    """A half message of a transaction (TRAN_MSG true, as Java's Boolean.parseBoolean reads it, or sysFlag
    PREPARED)."""
    if not (h.sys_flag & TX_MASK or TRAN_MSG_KEY in h.properties):
        return False
    return is_half_send(string_to_properties(h.properties) if h.properties else {}, h.sys_flag)


def _admit_transaction(ctx: BrokerContext, h: SendHeader) -> Refusal | None:
    """None for a half message this broker takes (or TRAN_MSG=false), else why not: transactions switched off
    (``rejectTransactionMessage``, RocketMQ's NO_PERMISSION), a batch (RocketMQ's batches carry no half), commit or
    rollback bits set by a producer (only the broker writes those)."""
    if not half_send(h):
        if h.sys_flag & TX_MASK:
            return Refusal(ResponseCode.MESSAGE_ILLEGAL, f"sysFlag {h.sys_flag} carries commit or rollback bits;"
                           " send a half message (TRAN_MSG=true, sysFlag PREPARED) and END_TRANSACTION instead")
        return None
    if ctx.transactions is None or ctx.settings.broker.reject_transaction_message:
        return Refusal(
            ResponseCode.NO_PERMISSION,
            f"the broker[{ctx.broker_name}] sending transaction message is forbidden (rejectTransactionMessage=true);"
            " send plain messages or use another broker",
        )
    if h.batch:
        return Refusal(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support transaction messages;"
                       " send each half message on its own")
    return None


def _queue(h: SendHeader, cfg: TopicConfig, topic: str, *, to_dlq: bool) -> Target | Refusal:
    if not perm_writeable(cfg.perm):
        return Refusal(
            ResponseCode.NO_PERMISSION, f"topic {topic} is not writable (perm {perm_text(cfg.perm)}); ask an admin"
        )
    queue_id = h.queue_id
    if queue_id < 0 or to_dlq:
        queue_id = random.randrange(max(1, cfg.write_queue_nums))
    bad = validate.queue_id(queue_id, cfg.write_queue_nums, topic, "write")
    if bad:
        return Refusal(bad.code, bad.remark)
    return Target(topic, queue_id, cfg, to_dlq)


def _auto_create(ctx: BrokerContext, h: SendHeader) -> TopicConfig | Refusal:
    broker = ctx.settings.broker
    template = ctx.topics.get(h.default_topic)
    if template is not None:
        perm, queues = template.perm, template.write_queue_nums
        if h.default_topic == DEFAULT_TOPIC and not broker.auto_create_topic_enable:
            perm = PERM_READ | PERM_WRITE  # RocketMQ: TBW102 does not inherit while auto-creation is off
    elif h.default_topic == DEFAULT_TOPIC and broker.auto_create_topic_enable:
        perm, queues = PERM_INHERIT | PERM_READ | PERM_WRITE, broker.default_topic_queue_nums
    else:
        perm, queues = 0, 0
    if not perm & PERM_INHERIT:
        auto_off = h.default_topic == DEFAULT_TOPIC
        why = (
            "autoCreateTopicEnable=false"
            if auto_off
            else f"its template {h.default_topic!r} does not exist or does not allow inheriting"
        )
        fix = f"create it first (mqctl updateTopic -t {h.topic} -c {broker.broker_cluster_name})"
        if auto_off:
            fix += ", or set autoCreateTopicEnable=true in the broker's conf to create topics on their first send"
        return Refusal(
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{h.topic}] not exist, apply first please! It does not exist on broker {ctx.broker_name} and"
            f" {why}; {fix}",
        )
    nums = min(h.default_topic_queue_nums, queues) if h.default_topic_queue_nums > 0 else queues
    bad = validate.queue_nums(nums, nums)
    if bad:
        return Refusal(bad.code, f"defaultTopicQueueNums: {bad.remark}")
    cfg, created = ctx.topics.auto_create(h.topic, nums, perm & ~PERM_INHERIT)
    if cfg is None:
        return Refusal(
            ResponseCode.TOPIC_NOT_EXIST,
            ctx.topics.refusal_remark(h.topic, ctx.broker_name, broker.broker_cluster_name),
        )
    if created:
        ctx.topics_changed()
    return cfg


def _admit_retry(ctx: BrokerContext, h: SendHeader) -> Target | Refusal:
    bad = validate.topic_name(h.topic, ResponseCode.MESSAGE_ILLEGAL)
    if bad:
        return Refusal(bad.code, bad.remark)
    if h.batch:
        return Refusal(
            ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {h.topic}; send them one by one"
        )
    group_name = h.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
    group = ctx.groups.get(group_name)
    if group is None:
        group = ctx.groups.find_or_create(group_name)
        if group is not None:
            ctx.groups_changed()
    if group is None:
        return Refusal(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, ctx.groups.refusal_remark(group_name, ctx.broker_name)
        )
    max_times = h.max_reconsume_times if h.max_reconsume_times is not None and h.max_reconsume_times >= 0 else (
        group.retry_max_times
    )
    if h.reconsume_times >= max_times:
        cfg, created = ctx.topics.create_dlq_topic(group_name)
        if created:
            ctx.topics_changed()
        return _queue(h, cfg, cfg.topic_name, to_dlq=True)
    cfg, created = ctx.topics.create_retry_topic(group_name, group.retry_queue_nums)
    if created:
        ctx.topics_changed()
    return _queue(h, cfg, h.topic, to_dlq=False)
