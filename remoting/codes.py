"""RocketMQ's ResponseCode numbers (common/protocol/ResponseCode.java) and what each means to a caller.

Every pyrmq response carries ``code`` and ``remark`` in-band; gRPC status codes are reserved for transport
failures. ``SEND_OK_CODES`` are the four codes that mean "stored on the master" (RocketMQ counts all four as
sent; FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE say the promise is weaker than asked).
"""

from __future__ import annotations

import enum


class ResponseCode(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29  # pyrmq: a request field that can never be valid (RocketMQ 5 uses 29 too)


MEANING: dict[ResponseCode, str] = {
    ResponseCode.SUCCESS: "done",
    ResponseCode.SYSTEM_ERROR: "the server failed to handle the request",
    ResponseCode.SYSTEM_BUSY: "the server is overloaded; retry later",
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "this server does not support the request",
    ResponseCode.FLUSH_DISK_TIMEOUT: "stored on the master but not flushed to its disk in time",
    ResponseCode.SLAVE_NOT_AVAILABLE: "stored on the master; no slave in sync to replicate to",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "stored on the master; the slave did not acknowledge in time",
    ResponseCode.MESSAGE_ILLEGAL: "the message breaks a limit (size, topic name, properties)",
    ResponseCode.SERVICE_NOT_AVAILABLE: "the broker cannot take writes now (slave, disk full, stopping)",
    ResponseCode.VERSION_NOT_SUPPORTED: "the client version is not supported",
    ResponseCode.NO_PERMISSION: "the topic, group or broker does not allow this operation",
    ResponseCode.TOPIC_NOT_EXIST: "the topic does not exist",
    ResponseCode.TOPIC_EXIST_ALREADY: "the topic exists already",
    ResponseCode.PULL_NOT_FOUND: "no new message at this offset",
    ResponseCode.PULL_RETRY_IMMEDIATELY: "nothing matched here; pull again (maybe from the suggested broker)",
    ResponseCode.PULL_OFFSET_MOVED: "the offset is out of the queue's range; use next_begin_offset",
    ResponseCode.QUERY_NOT_FOUND: "nothing stored for this query",
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: "the subscription expression cannot be parsed",
    ResponseCode.SUBSCRIPTION_NOT_EXIST: "the consumer is not subscribed to this topic",
    ResponseCode.SUBSCRIPTION_NOT_LATEST: "the subscription changed; resend the heartbeat",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "the consumer group does not exist on this broker",
    ResponseCode.INVALID_PARAMETER: "a request field is invalid",
}

# Codes under which a send was stored on the master (RocketMQ's "sendOK" set).
SEND_OK_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)


def describe(code: int) -> str:
    try:
        rc = ResponseCode(code)
    except ValueError:
        return f"code {code}"
    return f"{rc.name} ({MEANING[rc]})"
