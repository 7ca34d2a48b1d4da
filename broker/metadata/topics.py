"""TopicConfigManager: every topic this broker serves, its queue counts and permission, and the DataVersion.

The table is registered with the nameservers (the route clients see) and copied by slaves (spec §4 step 1), so
each change bumps the DataVersion once and is persisted to ``config/topics.json`` in RocketMQ's format::

    {"dataVersion": {"counter": N, "timestamp": T},
     "topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
                                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": false}}}

System topics are created at startup: ``SCHEDULE_TOPIC_XXXX`` (one queue per delay level, at least 18).
``%RETRY%<group>`` topics are created on heartbeat / send-back, ``%DLQ%<group>`` with write permission only,
as RocketMQ does, so nobody consumes a dead-letter queue by accident.

A send to an unknown topic creates it from TBW102 when ``autoCreateTopicEnable`` (RocketMQ's default): at most
``maxAutoCreatedTopics`` topics are created that way (``auto_create``; the file's ``autoCreatedTopics`` key, pyrmq's,
keeps the count across restarts); beyond it the send is refused with ``refusal_remark`` until an operator creates
the topic with updateTopic (which makes it explicit), deletes unused ones or raises the key. Retry and DLQ topics
are bounded by their groups (``maxAutoCreatedSubscriptionGroups``) and not counted here. Persistence is batched
(``config_file``): an auto-created topic lost by a crash within the interval is created again by the next send.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from broker.metadata.config_file import ConfigFile
from broker.store.types import SCHEDULE_TOPIC
from common.perm import PERM_RW, PERM_WRITE
from common.persist import Render
from remoting.data_version import DataVersion
from remoting.message_codec import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.topic_config import TopicConfig

SCHEDULE_TOPIC_MIN_QUEUES = 18
DEFAULT_MAX_AUTO_CREATED_TOPICS = 10_000

# Topics a producer may never send to (RocketMQ TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET plus TBW102).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "TBW102",
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # a system topic clients send trace records to (TopicValidator)


def is_system_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS or topic.lower().startswith(SYSTEM_TOPIC_PREFIX)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


class TopicConfigManager(ConfigFile):
    def __init__(
        self,
        config_dir: str | Path,
        *,
        schedule_queue_nums: int = SCHEDULE_TOPIC_MIN_QUEUES,
        max_auto_created: int = DEFAULT_MAX_AUTO_CREATED_TOPICS,
        persist_interval_s: float = 0.0,
    ) -> None:
        super().__init__(Path(config_dir) / "topics.json", persist_interval_s=persist_interval_s)
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self._schedule_queue_nums = max(SCHEDULE_TOPIC_MIN_QUEUES, schedule_queue_nums)
        self.max_auto_created = max_auto_created
        self.auto_created: set[str] = set()
        self.auto_create_refusals = 0
        self._created_at: dict[str, int] = {}  # topic auto-created on send -> the writer's change count then

    # persistence --------------------------------------------------------------------------------------------
    def to_json(self) -> Any:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: cfg.to_json() for name, cfg in self.table.items()},
        }

    def file_snapshot(self) -> Render:
        table, version, auto = dict(self.table), self.data_version.copy(), list(self.auto_created)
        return lambda: {
            "dataVersion": version.to_json(),
            "topicConfigTable": {name: cfg.to_json() for name, cfg in table.items()},
            "autoCreatedTopics": sorted(auto),
        }

    def load_json(self, obj: Any) -> None:
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.table = {name: TopicConfig.from_json(cfg) for name, cfg in (obj.get("topicConfigTable") or {}).items()}
        auto = obj.get("autoCreatedTopics")
        self.auto_created = {n for n in auto if n in self.table} if isinstance(auto, list) else set()

    def ensure_system_topics(self) -> None:
        """Create the topics the broker itself writes to; called after ``load()``."""
        if SCHEDULE_TOPIC not in self.table:
            n = self._schedule_queue_nums
            self._put(TopicConfig(SCHEDULE_TOPIC, n, n, PERM_RW))

    # queries ------------------------------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self.table

    def snapshot(self) -> tuple[list[TopicConfig], DataVersion]:
        return list(self.table.values()), self.data_version.copy()

    # changes (each bumps the DataVersion and marks the file dirty) ------------------------------------------
    def _put(self, cfg: TopicConfig) -> TopicConfig:
        self.table[cfg.topic_name] = cfg
        self.data_version.next_version()
        self.mark_dirty()
        return cfg

    def update(self, cfg: TopicConfig) -> TopicConfig:
        """Create or replace (UPDATE_AND_CREATE_TOPIC); the topic is an operator's from now on."""
        self.auto_created.discard(cfg.topic_name)
        return self._put(cfg)

    def auto_create(self, topic: str, queue_nums: int, perm: int) -> tuple[TopicConfig | None, bool]:
        """(config, created) for a send to a topic that may not exist yet; (None, False) once
        ``maxAutoCreatedTopics`` topics were auto-created (``refusal_remark`` says what to do)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing, False
        if len(self.auto_created) >= self.max_auto_created:
            self.auto_create_refusals += 1
            return None, False
        self.auto_created.add(topic)
        cfg = self._put(TopicConfig(topic, queue_nums, queue_nums, perm))
        if len(self._created_at) > 1024:
            self._created_at = {t: n for t, n in self._created_at.items() if n > self.writer.saved}
        self._created_at[topic] = self.writer.changes
        return cfg, True

    def unsaved(self, topic: str) -> bool:
        """True while a topic ``auto_create`` made is not on disk yet: its first send waits for ``persist()``, as
        RocketMQ persisted the topic before storing, so a crash never leaves acknowledged messages without a topic."""
        count = self._created_at.get(topic)
        if count is None:
            return False
        if count <= self.writer.saved:
            del self._created_at[topic]
            return False
        return True

    async def saved(self) -> None:
        """Wait for the pending write (a send path calls it when ``unsaved(topic)``; the check keeps a coroutine off
        every other send). A failed write was logged by the writer, which retries; the send goes on regardless."""
        try:
            await self.persist()
        except OSError:
            pass

    def refusal_remark(self, topic: str, broker_name: str, cluster: str) -> str:
        return (
            f"topic[{topic}] not exist, apply first please! It does not exist on broker {broker_name} and"
            f" {len(self.auto_created)} topics were auto-created already, the limit"
            f" maxAutoCreatedTopics={self.max_auto_created}; create it (mqctl updateTopic -t {topic} -c {cluster}),"
            " delete unused topics or raise maxAutoCreatedTopics in the broker's conf"
        )

    def create_if_absent(
        self, topic: str, queue_nums: int, perm: int = PERM_RW
    ) -> tuple[TopicConfig, bool]:
        """(config, created): auto-creation on send, and the retry / DLQ topics."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing, False
        return self._put(TopicConfig(topic, queue_nums, queue_nums, perm)), True

    def create_retry_topic(self, group: str, retry_queue_nums: int) -> tuple[TopicConfig, bool]:
        return self.create_if_absent(retry_topic(group), max(1, retry_queue_nums))

    def create_dlq_topic(self, group: str) -> tuple[TopicConfig, bool]:
        return self.create_if_absent(dlq_topic(group), 1, PERM_WRITE)

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self.auto_created.discard(topic)
        self.data_version.next_version()
        self.mark_dirty()
        return True

    def replace_all(self, configs: list[TopicConfig], data_version: DataVersion) -> bool:
        """Slave sync: take the master's table and version when the version differs; True when replaced."""
        if data_version == self.data_version:
            return False
        self.table = {cfg.topic_name: cfg for cfg in configs}
        self.auto_created = set()  # the master's topics count on the master
        self.data_version = data_version.copy()
        self.mark_dirty()
        return True

    def with_perm(self, cfg: TopicConfig, perm: int) -> TopicConfig:
        return replace(cfg, perm=perm)
