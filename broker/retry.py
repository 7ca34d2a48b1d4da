"""ConsumerSendMsgBack: a message the consumer failed to process goes to ``%RETRY%<group>`` through the delay
levels, or to ``%DLQ%<group>`` once it was retried too often (RocketMQ SendMessageProcessor.consumerSendMsgBack).

The original record is read by its commitlog offset, which the consumer names: ``broker.record_reader`` answers it
only when a whole message record starts exactly there (29 INVALID_PARAMETER otherwise, 22 QUERY_NOT_FOUND when it
expired; RocketMQ answers 1 to both, and its consumers, like pyrmq's, then send the message to the retry topic
themselves whatever the code). The copy keeps body, flag, keys, tags, UNIQ_KEY and user
properties, counts one more reconsume, and records where it came from: ``RETRY_TOPIC`` (the original topic,
kept across retries) and ``ORIGIN_MESSAGE_ID``. A retry carries ``DELAY = 3 + reconsumeTimes`` (or the level the
consumer asked for), capped at the highest configured level, so the store parks it in SCHEDULE_TOPIC_XXXX and the
schedule service delivers it to the retry topic when due. Consumers subscribe to ``%RETRY%<group>``.

A domain service: it answers a ``SendBackResult`` (no group, the record refused, or the store's ``PutResult``) and
``broker/processors/send_back.py`` turns that into a response code and remark, so the dependency points from the
request layer to this module, never back.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from broker.metadata.subscription_groups import SubscriptionGroupManager
from broker.metadata.topics import TopicConfigManager, dlq_topic, retry_topic
from broker.record_reader import RecordRefusal, max_record_size, record_at
from broker.store.types import MessageDraft, PutResult
from remoting.message_codec import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    decode,
)

log = logging.getLogger(__name__)

FIRST_RETRY_LEVEL = 3  # RocketMQ: level 3 + reconsumeTimes (10 s, 30 s, 1 m, ... with the default levels)


@dataclass(slots=True)
class SendBackRequest:
    group: str
    physical_offset: int
    delay_level: int = 0  # 0: 3 + reconsumeTimes; < 0: straight to the DLQ
    original_topic: str = ""
    original_msg_id: str = ""
    max_reconsume_times: int = 0  # 0: the group's retryMaxTimes


@dataclass(slots=True)
class SendBackResult:
    """Exactly one of: ``group_missing`` (why there is no such group: auto-creation is off or at its limit),
    ``refusal`` (no stored message starts at the offset), ``put`` (the store's answer for the copy put to ``topic``)."""

    group_missing: str = ""
    refusal: RecordRefusal | None = None
    put: PutResult | None = None
    topic: str = ""  # where the copy went
    reconsume_times: int = 0
    max_reconsume_times: int = 0  # the limit that applied

    @property
    def to_dlq(self) -> bool:
        return self.topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


class RetryService:
    def __init__(
        self, store, topics: TopicConfigManager, groups: SubscriptionGroupManager, max_delay_level: int
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.max_delay_level = max_delay_level

    async def send_back(self, req: SendBackRequest) -> tuple[SendBackResult, bool]:
        """(result, topics_changed): the caller persists and re-registers when a retry or DLQ topic was created."""
        group = self.groups.get(req.group) or self.groups.find_or_create(req.group)
        if group is None:
            return SendBackResult(group_missing=self.groups.refusal_remark(req.group, "this broker")), False
        raw = record_at(self.store, req.physical_offset, max_record_size(self.store.config.max_message_size),
                        "this broker")
        if isinstance(raw, RecordRefusal):
            return SendBackResult(refusal=raw), False
        original = decode(raw)
        reconsume = original.reconsume_times + 1
        max_times = req.max_reconsume_times if req.max_reconsume_times > 0 else group.retry_max_times
        props = dict(original.properties)
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        props.pop(PROPERTY_REAL_TOPIC, None)
        props.pop(PROPERTY_REAL_QUEUE_ID, None)
        source_topic = original.topic
        if not source_topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            props.setdefault(PROPERTY_RETRY_TOPIC, req.original_topic or source_topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, req.original_msg_id or original.msg_id)

        changed = False
        if reconsume > max_times or req.delay_level < 0:
            cfg, changed = self.topics.create_dlq_topic(req.group)
            target, queue_id = cfg.topic_name, 0
        else:
            cfg, changed = self.topics.create_retry_topic(req.group, group.retry_queue_nums)
            target = cfg.topic_name
            queue_id = random.randrange(max(1, cfg.write_queue_nums))
            level = req.delay_level if req.delay_level > 0 else FIRST_RETRY_LEVEL + original.reconsume_times
            props[PROPERTY_DELAY_TIME_LEVEL] = str(min(level, self.max_delay_level))
        draft = MessageDraft.stored_again(original, props, reconsume)
        result = await self.store.put_messages(target, queue_id, [draft])
        if target.startswith(DLQ_GROUP_TOPIC_PREFIX) and result.status.stored:
            log.info(
                "message at %d of group %s moved to %s after %d reconsumes",
                req.physical_offset,
                req.group,
                target,
                reconsume - 1,
            )
        return SendBackResult(put=result, topic=target, reconsume_times=reconsume,
                              max_reconsume_times=max_times), changed


__all__ = ["RetryService", "SendBackRequest", "SendBackResult", "dlq_topic", "retry_topic"]
