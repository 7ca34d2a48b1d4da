"""Request checks that need no store access: names, queue ids, message bodies and properties.

Each check returns ``None`` or a ``Rejection`` (code + a remark that says what to fix), so servicers read as
"validate -> domain call -> response". Clients may be hostile (reliability.md §7 B-MSG / B-CONS): every field
is checked here even when the SDK checks it too. Message bodies and properties are checked by the send processor
and the store, which see them in their wire form.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from broker.metadata.topics import is_system_topic
from remoting.codes import ResponseCode
from remoting.message_codec import (
    DLQ_GROUP_TOPIC_PREFIX,
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
