"""v2 status codes (``apache.rocketmq.v2.Code``): the one place where store statuses and remoting refusals become
the codes the RocketMQ 5 clients read (RocketMQ's proxy ``ResponseBuilder``).

Errors travel in-band, in each response's ``Status``; the servicer never lets an exception become a gRPC UNKNOWN.
A SYNC_MASTER's weak "stored" statuses are never OK: FLUSH_SLAVE_TIMEOUT is SLAVE_PERSISTENCE_TIMEOUT,
SLAVE_NOT_AVAILABLE is HA_NOT_AVAILABLE and FLUSH_DISK_TIMEOUT is MASTER_PERSISTENCE_TIMEOUT, each with a message
saying the message *is stored* on the master (the official client treats them as errors and resends, so a
duplicate is possible: the message says so).
"""

from __future__ import annotations

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.store.types import PutStatus
from remoting.codes import ResponseCode

Code = pb.Code


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message)


OK = status(Code.OK, "OK")

_PUT: dict[PutStatus, tuple[int, str]] = {
    PutStatus.PUT_OK: (Code.OK, "OK"),
    PutStatus.FLUSH_DISK_TIMEOUT: (
        Code.MASTER_PERSISTENCE_TIMEOUT,
        ("stored on the master but not flushed to disk within syncFlushTimeout (not lost unless the master's disk"
        " fails); a resend would store it twice"),
    ),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (
        Code.SLAVE_PERSISTENCE_TIMEOUT,
        ("stored on the master, not replicated: the slave did not acknowledge within slaveTimeout; a resend would"
        " store it twice. Check the slave and its HA port"),
    ),
    PutStatus.SLAVE_NOT_AVAILABLE: (
        Code.HA_NOT_AVAILABLE,
        ("stored on the master, not replicated: no slave is connected and in sync; a resend would store it twice."
        " Check the slave and its HA port"),
    ),
    PutStatus.MESSAGE_ILLEGAL: (Code.BAD_REQUEST, "the message breaks a store limit; fix it, do not retry"),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (
        Code.MESSAGE_PROPERTIES_TOO_LARGE,
        "the properties are longer than 32767 bytes; shorten keys, tag or user properties",
    ),
    PutStatus.SERVICE_NOT_AVAILABLE: (
        Code.INTERNAL_SERVER_ERROR,
        "the store does not take writes now (disk full or stopping); send to another broker",
    ),
    PutStatus.OS_PAGE_CACHE_BUSY: (Code.TOO_MANY_REQUESTS, "the store is busy; retry after a short pause"),
}


def put_status(put: PutStatus, store_remark: str = "") -> pb.Status:
    code, advice = _PUT.get(put, (Code.INTERNAL_SERVER_ERROR, f"the store failed with {put.value}; check the broker log"))
    return status(code, f"{store_remark}; {advice}" if store_remark and code != Code.OK else advice)


_REMOTING: dict[int, int] = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
}


def from_remoting(code: int, remark: str) -> pb.Status:
    """A refusal of a shared admission function (``send_admit``, ``validate``) as a v2 status."""
    return status(_REMOTING.get(code, Code.INTERNAL_SERVER_ERROR), remark)


def unsupported(feature: str, what_to_do: str) -> pb.Status:
    return status(Code.UNSUPPORTED, f"{feature} is not supported by pyrmq; {what_to_do}")
