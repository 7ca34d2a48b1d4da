"""The one place where store statuses become ResponseCodes (RocketMQ's SendMessageProcessor / PullMessageProcessor
switch statements).

Send: the four "stored" statuses keep their own codes so a producer can tell "stored and replicated" from
"stored on the master only" (spec §3.7 step 6). Pull: spec §5.2 step 4, including the rule that an empty or
unknown queue answers OFFSET_MOVED only when the consumer asked for an offset other than 0.
"""

from __future__ import annotations

from broker.store.types import GetStatus, PutStatus
from remoting.codes import ResponseCode

_PUT_CODES: dict[PutStatus, tuple[ResponseCode, str]] = {
    PutStatus.PUT_OK: (ResponseCode.SUCCESS, ""),
    PutStatus.FLUSH_DISK_TIMEOUT: (
        ResponseCode.FLUSH_DISK_TIMEOUT,
        "stored on the master but not flushed in time (syncFlushTimeout or the sender's deadline); do not resend",
    ),
    PutStatus.SLAVE_NOT_AVAILABLE: (
        ResponseCode.SLAVE_NOT_AVAILABLE,
        "stored on the master only: no slave is connected and in sync; check the slave and its HA port",
    ),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        "stored on the master; no slave acked in time (slaveTimeout or the sender's deadline); do not resend",
    ),
    PutStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "the message breaks a store limit; fix it, do not retry"),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the properties are longer than 32767 bytes; shorten keys, tags or user properties",
    ),
    PutStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "the store does not take writes now (slave, disk full or stopping); send to another master",
    ),
    PutStatus.OS_PAGE_CACHE_BUSY: (ResponseCode.SYSTEM_BUSY, "the store is busy; retry after a short pause"),
}


def put_code(status: PutStatus, store_remark: str = "") -> tuple[ResponseCode, str]:
    """(code, remark) for a put: the store's own remark first when it gave one, our advice otherwise."""
    code, advice = _PUT_CODES.get(status, (ResponseCode.SYSTEM_ERROR, ""))
    if code is ResponseCode.SYSTEM_ERROR and not advice:
        advice = f"the store failed with {status.value}; retry, and check the broker log if it persists"
    if store_remark and advice:
        return code, f"{store_remark}; {advice}"
    return code, store_remark or advice


def get_code(status: GetStatus, requested_offset: int) -> ResponseCode:
    if status is GetStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status in (GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_TOO_SMALL):
        return ResponseCode.PULL_OFFSET_MOVED
    if status in (GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_ONE):
        return ResponseCode.PULL_NOT_FOUND
    # MESSAGE_WAS_REMOVING, NO_MATCHED_MESSAGE
    return ResponseCode.PULL_RETRY_IMMEDIATELY


_PULL_REMARKS = {
    ResponseCode.PULL_NOT_FOUND: "no new message; pull again from nextBeginOffset",
    ResponseCode.PULL_RETRY_IMMEDIATELY: "nothing matched in this range; pull again from nextBeginOffset",
    ResponseCode.PULL_OFFSET_MOVED: "the offset is outside [minOffset, maxOffset); continue from nextBeginOffset",
}


def pull_remark(code: ResponseCode, status: GetStatus) -> str:
    """The store status first (RocketMQ's remark is exactly its name), then what to do when nothing came back."""
    text = _PULL_REMARKS.get(code)
    return f"{status.value}: {text}" if text else status.value
