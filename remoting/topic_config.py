"""RocketMQ's TopicConfig: one topic's queue counts, permission and flags, one definition for the broker (which
stores and registers it), the nameserver (which builds routes from it) and the SDK (GET_ALL_TOPIC_CONFIG).

Its JSON form is the entry of ``topicConfigTable`` in topics.json and in the registration body::

    {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
     "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": false}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.perm import PERM_RW
from remoting.headers import parse_int

DEFAULT_QUEUE_NUMS = 16  # RocketMQ's TopicConfig default read/write queue count
SINGLE_TAG = "SINGLE_TAG"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = PERM_RW
    topic_sys_flag: int = 0
    order: bool = False
    topic_filter_type: str = SINGLE_TAG

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicConfig:
        """The broker's reading (topics.json, the slave's copy of the master's table): numbers strictly
        (``NumberError``), the filter type always SINGLE_TAG (pyrmq filters by tag only). The nameserver and
        the SDK read theirs with their own error types."""
        return cls(
            topic_name=str(obj["topicName"]),
            read_queue_nums=parse_int(obj.get("readQueueNums", DEFAULT_QUEUE_NUMS)),
            write_queue_nums=parse_int(obj.get("writeQueueNums", DEFAULT_QUEUE_NUMS)),
            perm=parse_int(obj.get("perm", PERM_RW)),
            topic_sys_flag=parse_int(obj.get("topicSysFlag", 0)),
            order=bool(obj.get("order", False)),
        )
