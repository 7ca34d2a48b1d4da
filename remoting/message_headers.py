"""The send and pull request headers (spec remoting.md §3.1, §4.1), shared by the broker and the SDK.

SEND_MESSAGE (10) carries full field names; SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) carry the
one-letter keys of ``V2_KEYS``. Both parse into one ``SendHeader``; the SDK writes V2. pyrmq's own extensions
travel as extra fields that RocketMQ clients never send and RocketMQ brokers ignore:

- ``dedup`` = ``true``: the broker skips messages whose UNIQ_KEY it stored for the topic within its dedup
  window and repeats their first result (the Spark sink's exactly-once writes).
- ``timeoutMillis``: how long, in ms, the sender still waits for this answer as the request leaves it. The broker
  answers its status (FLUSH_SLAVE_TIMEOUT, FLUSH_DISK_TIMEOUT) a margin before that instead of waiting its full
  slaveTimeout / syncFlushTimeout, so the sender learns that the message is stored on the master rather than timing
  out without knowing. Without it (RocketMQ clients) the broker waits as configured.

PULL_MESSAGE (11) uses RocketMQ 5's optional ``maxMsgBytes`` to cap a pull's bytes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from remoting.codes import RequestCode
from remoting.headers import Fields

# V2 key -> V1 name (SendMessageRequestHeaderV2)
V2_KEYS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}
V1_KEYS = {v: k for k, v in V2_KEYS.items()}
DEDUP_FIELD = "dedup"
TIMEOUT_FIELD = "timeoutMillis"
DEFAULT_TOPIC = "TBW102"

# PullSysFlag
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4
PULL_CLASS_FILTER = 0x8
PULL_LITE = 0x10


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True, kw_only=True)
class SendHeader:
    """One send request's header; senders name what differs from RocketMQ's defaults."""

    producer_group: str
    topic: str
    queue_id: int
    default_topic: str = DEFAULT_TOPIC
    default_topic_queue_nums: int = 4
    sys_flag: int = 0
    born_timestamp: int = field(default_factory=_now_ms)
    flag: int = 0
    properties: str = ""
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    batch: bool = False
    broker_name: str | None = None
    dedup: bool = False
    timeout_millis: int | None = None  # pyrmq: what the sender still waits, ms (``TIMEOUT_FIELD``)

    @classmethod
    def parse(cls, code: int, ext: dict[str, str] | None) -> SendHeader:
        return cls.parse_plain(code, ext)[0]

    @classmethod
    def parse_plain(cls, code: int, ext: dict[str, str] | None) -> tuple[SendHeader, bool]:
        """``parse``, and whether the header was plain: every number it carries is unsigned decimal digits of a
        size in range (a broker then need not look for signs again)."""
        if ext is not None:
            v2 = code != RequestCode.SEND_MESSAGE and "b" in ext
            fast = _parse_plain(code, ext, _V2_NAMES if v2 else _V1_NAMES)
            if fast is not None:
                return fast, True
        return cls.parse_fields(code, ext), False

    @classmethod
    def parse_fields(cls, code: int, ext: dict[str, str] | None) -> SendHeader:
        """The general reader (every field through ``Fields``: its errors name the field); ``parse`` takes a
        shortcut for plain headers that gives the same result."""
        if code != RequestCode.SEND_MESSAGE and ext is not None and "b" in ext:
            ext = {V2_KEYS.get(k, k): v for k, v in ext.items()}
        f = Fields(ext, "send request")
        return cls(
            producer_group=f.req_str("producerGroup"),
            topic=f.req_str("topic"),
            default_topic=f.str("defaultTopic", DEFAULT_TOPIC) or DEFAULT_TOPIC,
            default_topic_queue_nums=f.int("defaultTopicQueueNums", 4) or 4,
            queue_id=f.req_int("queueId"),
            sys_flag=f.int("sysFlag", 0) or 0,
            born_timestamp=f.long("bornTimestamp", 0) or 0,
            flag=f.int("flag", 0) or 0,
            properties=f.str("properties", "") or "",
            reconsume_times=f.int("reconsumeTimes", 0) or 0,
            max_reconsume_times=f.int("maxReconsumeTimes"),
            batch=code == RequestCode.SEND_BATCH_MESSAGE or f.bool("batch"),
            broker_name=f.str("bname"),
            dedup=f.bool(DEDUP_FIELD),
            timeout_millis=f.long(TIMEOUT_FIELD),
        )

    def to_v2(self) -> dict[str, str]:
        ext = {
            "a": self.producer_group,
            "b": self.topic,
            "c": self.default_topic,
            "d": str(self.default_topic_queue_nums),
            "e": str(self.queue_id),
            "f": str(self.sys_flag),
            "g": str(self.born_timestamp),
            "h": str(self.flag),
            "i": self.properties,
            "j": str(self.reconsume_times),
            "k": "false",
            "m": "true" if self.batch else "false",
        }
        if self.max_reconsume_times is not None:
            ext["l"] = str(self.max_reconsume_times)
        if self.broker_name:
            ext["n"] = self.broker_name
        if self.dedup:
            ext[DEDUP_FIELD] = "true"
        if self.timeout_millis is not None:
            ext[TIMEOUT_FIELD] = str(self.timeout_millis)
        return ext


# The fields SendHeader.parse reads, in this order, under their V1 and V2 names.
_FIELD_ORDER = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                "bornTimestamp", "flag", "properties", "reconsumeTimes", "maxReconsumeTimes", "batch", "bname")
_V1_NAMES = _FIELD_ORDER
_V2_NAMES = tuple(V1_KEYS[n] for n in _FIELD_ORDER)
_V1_SET = frozenset(_V1_NAMES)


def _small(value: str | None, digits: int) -> int | None:
    """An unsigned decimal of fewer than ``digits`` digits (always in range), 0 for absent/empty; None otherwise."""
    if not value:
        return 0
    if len(value) < digits and value.isascii() and value.isdigit():
        return int(value)
    return None


def _parse_plain(code: int, ext: dict[str, str], names: tuple[str, ...]) -> SendHeader | None:
    """SendHeader.parse for the header every client sends (small unsigned numbers, plain booleans), without a
    Fields call per field; None for anything else, which the general parse then reads (and names what is wrong).
    The result is the general parse's for the same header."""
    get = ext.get
    group, topic, d_topic, d_nums, queue, sys_flag, born, flag, props, recon, max_recon, batch, bname = map(get, names)
    if not group or not topic or not queue:
        return None
    if names is _V2_NAMES and not _V1_SET.isdisjoint(ext):  # V1 names inside a V2 header: the general rules
        return None
    small = (d_nums, queue, sys_flag, flag, recon)
    if (
        d_nums and sys_flag and flag and recon and born and len(born) < 19 and max(map(len, small)) < 10
        and (joined := "".join(small) + born).isdigit() and joined.isascii()
    ):  # what every client sends: all five present, digits only; one check for all of them
        d_nums_i, queue_i, sys_i, flag_i, recon_i = map(int, small)
        born_i = int(born)
    else:
        d_nums_i, queue_i, sys_i, flag_i, recon_i = (_small(d_nums, 10), _small(queue, 10), _small(sys_flag, 10),
                                                     _small(flag, 10), _small(recon, 10))
        born_i = _small(born, 19)
        if None in (d_nums_i, queue_i, sys_i, flag_i, recon_i, born_i):
            return None
    max_recon_i = None
    if max_recon:
        max_recon_i = _small(max_recon, 10)
        if max_recon_i is None:
            return None
    timeout = get(TIMEOUT_FIELD)
    timeout_i = None
    if timeout:
        timeout_i = _small(timeout, 19)
        if timeout_i is None:
            return None
    flags = []
    for value in (batch, get(DEDUP_FIELD)):
        if not value or value == "false" or value == "0":
            flags.append(False)
        elif value == "true" or value == "1":
            flags.append(True)
        else:
            return None
    return SendHeader(
        producer_group=group, topic=topic, default_topic=d_topic or DEFAULT_TOPIC,
        default_topic_queue_nums=d_nums_i or 4, queue_id=queue_i, sys_flag=sys_i, born_timestamp=born_i,
        flag=flag_i, properties=props or "", reconsume_times=recon_i, max_reconsume_times=max_recon_i,
        batch=code == RequestCode.SEND_BATCH_MESSAGE or flags[0], broker_name=bname or None, dedup=flags[1],
        timeout_millis=timeout_i,
    )


@dataclass(slots=True, kw_only=True)
class PullHeader:
    """One pull request's header; pullers name what differs from RocketMQ's defaults (no flags, no commit, no
    long polling, the broker's registered subscription, no byte cap)."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 0
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str | None = None
    max_msg_bytes: int | None = None

    @classmethod
    def parse(cls, ext: dict[str, str] | None) -> PullHeader:
        f = Fields(ext, "pull request")
        return cls(
            consumer_group=f.req_str("consumerGroup"),
            topic=f.req_str("topic"),
            queue_id=f.req_int("queueId"),
            queue_offset=f.req_long("queueOffset"),
            max_msg_nums=f.req_int("maxMsgNums"),
            sys_flag=f.req_int("sysFlag"),
            commit_offset=f.long("commitOffset", 0) or 0,
            suspend_timeout_millis=f.long("suspendTimeoutMillis", 0) or 0,
            subscription=f.str("subscription"),
            sub_version=f.long("subVersion", 0) or 0,
            expression_type=f.str("expressionType"),
            max_msg_bytes=f.int("maxMsgBytes"),
        )

    def to_ext(self) -> dict[str, str]:
        ext = {
            "consumerGroup": self.consumer_group,
            "topic": self.topic,
            "queueId": str(self.queue_id),
            "queueOffset": str(self.queue_offset),
            "maxMsgNums": str(self.max_msg_nums),
            "sysFlag": str(self.sys_flag),
            "commitOffset": str(self.commit_offset),
            "suspendTimeoutMillis": str(self.suspend_timeout_millis),
            "subVersion": str(self.sub_version),
        }
        if self.subscription is not None:
            ext["subscription"] = self.subscription
        if self.expression_type is not None:
            ext["expressionType"] = self.expression_type
        if self.max_msg_bytes is not None:
            ext["maxMsgBytes"] = str(self.max_msg_bytes)
        return ext
