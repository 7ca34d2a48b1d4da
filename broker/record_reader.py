"""One stored message read at a commitlog offset that a caller named: VIEW_MESSAGE_BY_ID's offset (from an offset
msgId) and CONSUMER_SEND_MSG_BACK's ``offset`` (issue 12 item 8).

The store's ``read_record`` trusts its offset, as the pull path may (its offsets come from the consume queue): it
reads the 4-byte size there and copies that many bytes. An offset from a request may point anywhere: into the
middle of a record, into a message body holding bytes shaped like a record, at the BLANK record that ends a file,
or past the end, and a size read there may claim most of a file. So ``record_at`` answers the bytes only when a
whole, intact message record starts exactly at the offset:

- the offset lies in [min, max) of the commitlog (below the min: the file expired and was deleted);
- at most ``max_record_size`` bytes are looked at, through a zero-copy view released before returning, and
  ``check_record`` finds the message magic code, a total size within bounds, length fields that add up to it and
  a body whose CRC matches;
- the record's own PHYSICALOFFSET field is the offset asked for (a record copied inside a body carries the offset
  its writer gave it, not its position);
- the commitlog's own chain of records has a record starting there (issue 22 item 6: a producer can predict the
  offset its body will land at, max offset + 88, and write a record claiming it, CRC and all). Below the
  dispatched offset every record has its consume-queue unit, so the unit at the record's claimed topic, queue
  and queue offset must point at exactly this offset and size; at or past it (a slave's dispatcher catching up)
  the size fields are followed from the dispatched offset, or the file's start if later, at most
  ``MAX_WALK_RECORDS`` records (2 SYSTEM_BUSY beyond: retry once the dispatcher caught up).

Anything else is a ``RecordRefusal`` with the code and a remark saying what to send instead. Pure over the store's
public reads; event loop only.
"""

from __future__ import annotations

from typing import NamedTuple

from broker.store.get import unit_points_at, walk_reaches
from remoting.codes import ResponseCode
from remoting.message_codec import (
    MAX_PROPERTIES_LEN,
    MAX_RETRY_TOPIC_LEN,
    MIN_RECORD_SIZE,
    RecordStatus,
    check_record,
)


MAX_WALK_RECORDS = 2048  # at most about 0.7 ms of the event loop (4,096 steps measured 1.5 ms)


class RecordRefusal(NamedTuple):
    code: ResponseCode
    remark: str


def max_record_size(max_message_size: int) -> int:
    """The largest record a body of ``max_message_size`` bytes makes (longest topic and properties)."""
    return max_message_size + MIN_RECORD_SIZE + MAX_RETRY_TOPIC_LEN + MAX_PROPERTIES_LEN


def record_at(store, offset: int, max_size: int, where: str) -> bytes | RecordRefusal:
    """The stored message record starting at commitlog ``offset``, or why there is none; ``where`` names the
    broker in remarks."""
    low, high = store.min_phy_offset, store.max_phy_offset
    if offset < 0 or offset >= high:
        return RecordRefusal(
            ResponseCode.INVALID_PARAMETER,
            f"can not find message by the offset, {offset}: it is outside the commitlog [{low}, {high}) of {where};"
            " give the commitlog offset of a stored message (the one inside its offset msgId)",
        )
    if offset < low:
        return RecordRefusal(
            ResponseCode.QUERY_NOT_FOUND,
            f"can not find message by the offset, {offset}: the commitlog of {where} now starts at {low}, the"
            " message expired and was deleted",
        )
    found = store.commitlog_slice(offset, max_size)
    if found is None:
        why = "nothing readable there"
    else:
        view = found.view
        try:
            result = check_record(view, 0, check_crc=True, max_size=max_size)
            info = result.info
            if result.status is RecordStatus.VALID and info.physical_offset == offset:
                chained = in_chain(store, offset, info)
                if chained:
                    return bytes(view[: result.size])
                if chained is None:
                    return RecordRefusal(
                        ResponseCode.SYSTEM_BUSY,
                        f"can not find message by the offset, {offset}: {where} has not indexed its commitlog that"
                        f" far yet (dispatched up to {store.dispatched_phy_offset}); retry in a moment",
                    )
                why = (
                    "the bytes there look like a record, but the broker's index has no message starting there: they"
                    " lie inside another message, or belong to a deleted topic"
                )
            elif result.status is RecordStatus.VALID:
                why = f"the bytes there are a record written for offset {info.physical_offset}"
            else:
                why = result.status.value + (f": {result.reason}" if result.reason else "")
        finally:
            view.release()
    return RecordRefusal(
        ResponseCode.INVALID_PARAMETER,
        f"can not find message by the offset, {offset}: no message record starts there on {where} ({why});"
        " give the commitlog offset of a stored message (the one inside its offset msgId)",
    )


def in_chain(store, offset: int, info) -> bool | None:
    """Whether the commitlog's chain of records has the record ``info`` describes start at ``offset``; None when a
    bounded walk could not tell."""
    if unit_points_at(store.consume_queues, info.topic, info.queue_id, info.queue_offset, offset, info.size):
        return True
    dispatched = store.dispatched_phy_offset
    if offset < dispatched:
        return False  # every record below the dispatched offset has its unit, and this one has none
    return walk_reaches(store.commitlog, dispatched, offset, MAX_WALK_RECORDS)
