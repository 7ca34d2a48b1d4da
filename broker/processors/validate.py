"""Request checks that need no store access: names, queue ids, message bodies and properties.

Each check returns ``None`` or a ``Rejection`` (code + a remark that says what to fix), so servicers read as
"validate -> domain call -> response". Clients may be hostile (reliability.md §7 B-MSG / B-CONS): every field
is checked here even when the SDK checks it too. Body and property checks loop once over the batch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from broker.metadata.topics import is_system_topic
from remoting.codes import ResponseCode
from remoting.message_codec import (
    DLQ_GROUP_TOPIC_PREFIX,
    MAX_PROPERTIES_LEN,
    PROPERTY_DELAY_TIME_LEVEL,
    RETRY_GROUP_TOPIC_PREFIX,
    validate_topic,
)

MAX_GROUP_LEN = 120
MAX_QUEUE_NUMS = 1024
_GROUP_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class Rejection(NamedTuple):
    code: ResponseCode
    remark: str


def topic_name(topic: str, code: ResponseCode = ResponseCode.INVALID_PARAMETER) -> Rejection | None:
    error = validate_topic(topic)
    if error:
        return Rejection(code, f"{error}; rename the topic")
    return None


def send_topic(topic: str) -> Rejection | None:
    """A producer's target topic: a valid name that is neither a system topic nor a retry/DLQ topic."""
    bad = topic_name(topic, ResponseCode.MESSAGE_ILLEGAL)
    if bad:
        return bad
    if is_system_topic(topic):
        return Rejection(
            ResponseCode.NO_PERMISSION, f"sending to system topic {topic} is forbidden; use your own topic"
        )
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        return Rejection(
            ResponseCode.NO_PERMISSION,
            f"{topic} is a retry/dead-letter topic; return messages with ConsumerSendMsgBack instead of SendMessage",
        )
    return None


def admin_topic(topic: str) -> Rejection | None:
    bad = topic_name(topic)
    if bad:
        return bad
    if is_system_topic(topic):
        return Rejection(ResponseCode.NO_PERMISSION, f"{topic} is a system topic; it cannot be changed or deleted")
    return None


def group_name(group: str) -> Rejection | None:
    if not group:
        return Rejection(ResponseCode.INVALID_PARAMETER, "the consumer group is empty; set a group name")
    if len(group) > MAX_GROUP_LEN:
        return Rejection(
            ResponseCode.INVALID_PARAMETER, f"group name is {len(group)} characters, the limit is {MAX_GROUP_LEN}"
        )
    if not _GROUP_RE.match(group):
        return Rejection(
            ResponseCode.INVALID_PARAMETER, f"group {group!r} may only use letters, digits, '%', '|', '-' and '_'"
        )
    return None


def queue_id(qid: int, queue_nums: int, topic: str, kind: str) -> Rejection | None:
    if 0 <= qid < queue_nums:
        return None
    return Rejection(
        ResponseCode.INVALID_PARAMETER,
        f"queue_id {qid} is out of range: topic {topic} has {queue_nums} {kind} queues (0..{queue_nums - 1})",
    )


def queue_nums(read: int, write: int) -> Rejection | None:
    for name, value in (("read_queue_nums", read), ("write_queue_nums", write)):
        if not 1 <= value <= MAX_QUEUE_NUMS:
            return Rejection(ResponseCode.INVALID_PARAMETER, f"{name}={value} must be between 1 and {MAX_QUEUE_NUMS}")
    return None


def messages(batch: Sequence, max_body_bytes: int, max_delay_level: int) -> Rejection | None:
    """Bodies, property text and delay levels of a batch of proto ``Message``s (one pass)."""
    if not batch:
        return Rejection(ResponseCode.INVALID_PARAMETER, "the request carries no message; add at least one")
    for index, msg in enumerate(batch):
        size = len(msg.body)
        if size == 0:
            return Rejection(ResponseCode.MESSAGE_ILLEGAL, f"message {index} has an empty body; send a non-empty body")
        if size > max_body_bytes:
            return Rejection(
                ResponseCode.MESSAGE_ILLEGAL,
                f"message {index} body is {size} bytes, over maxMessageSize {max_body_bytes}; split or compress it",
            )
        props = msg.properties
        if props:
            prop_bytes = 0
            for key, value in props.items():
                if not key or "\x01" in key or "\x02" in key or "\x01" in value or "\x02" in value:
                    return Rejection(
                        ResponseCode.MESSAGE_ILLEGAL,
                        f"message {index} property {key!r} is empty or contains the separators \\u0001/\\u0002;"
                        " remove them",
                    )
                prop_bytes += len(key) + len(value) + 2
            if prop_bytes > MAX_PROPERTIES_LEN:
                return Rejection(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"message {index} properties take over {MAX_PROPERTIES_LEN} bytes; shorten them",
                )
            delay = props.get(PROPERTY_DELAY_TIME_LEVEL)
            if delay is not None and (not delay.isdigit() or int(delay) > max_delay_level):
                return Rejection(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"message {index} DELAY={delay!r} is not a delay level; use 0..{max_delay_level}",
                )
    return None
