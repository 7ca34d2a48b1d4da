"""Receipt handles: RocketMQ's 9 space-separated fields (spec/pop.md §7.2), opaque to v2 clients.

``ckStartOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset commitLogOffset``;
topicType 0 is the subscribed topic, 1 the group's pop retry topic ``%RETRY%{group}_{topic}``. ``parse`` raises
``ValueError`` saying what is wrong; a handle from another broker parses, and the service refuses it by name.
"""

from __future__ import annotations

from dataclasses import dataclass

REVIVE_QID = 0
TOPIC_NORMAL = 0
TOPIC_RETRY = 1


def pop_retry_topic(group: str, topic: str) -> str:
    return f"%RETRY%{group}_{topic}"


@dataclass(frozen=True)
class Receipt:
    start_offset: int
    pop_time_ms: int
    invisible_ms: int
    topic_type: int
    broker_name: str
    queue_id: int
    offset: int
    commitlog_offset: int

    def encode(self) -> str:
        return (f"{self.start_offset} {self.pop_time_ms} {self.invisible_ms} {REVIVE_QID} {self.topic_type} "
                f"{self.broker_name} {self.queue_id} {self.offset} {self.commitlog_offset}")

    def real_topic(self, group: str, topic: str) -> str:
        return pop_retry_topic(group, topic) if self.topic_type == TOPIC_RETRY else topic

    @property
    def expires_at_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms


def parse(handle: str) -> Receipt:
    parts = handle.split(" ")
    if len(parts) != 9:
        raise ValueError(f"a receipt handle has 9 space-separated fields, this one {len(parts)}")
    try:
        so, pt, it, _rq, tt = (int(p) for p in parts[:5])
        q, qo, co = (int(p) for p in parts[6:])
    except ValueError:
        raise ValueError("a receipt handle's fields other than the broker name are decimal numbers") from None
    if tt not in (TOPIC_NORMAL, TOPIC_RETRY) or min(so, pt, it, q, qo) < 0:
        raise ValueError("the receipt handle's numbers are out of range")
    return Receipt(so, pt, it, tt, parts[5], q, qo, co)
