"""A reference read path: what ``MessageStore.get_message`` must return, computed the slow, obvious way.

``tests/unit/store/test_get_equivalence.py`` checks the optimised read path (``broker/store/get.py``: units
unpacked in one call, batch caps found by bisection, records returned as memoryviews of the mapping) against it,
and ``bench/store_bench.py`` measures both. Built on the store's public API only (``consume_queues``,
``commitlog``, ``config``), so it follows the store's behaviour, not its internals. Status rules: spec §5.1; the
offset corrections of a SLAVE without ``offsetCheckInSlave`` are not modelled (a master's store only).
"""

from __future__ import annotations

from broker.store.consume_queue import UNIT, UNIT_SIZE
from broker.store.get import TOTAL_PHYSICAL_MEMORY
from broker.store.message_store import MessageStore
from broker.store.types import GetResult, GetStatus
from remoting.message_codec import PROPERTY_TAGS, TagFilter, decode


def naive_get(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    max_total_bytes: int,
    tag_filter: TagFilter | None,
) -> GetResult:
    """``MessageStore.get_message``'s answer, found the slow way: the checks in order, then one
    ``commitlog.read`` per consume-queue unit and the batch caps checked per message (the store's first read
    path)."""
    cfg = store.config
    max_offset_py = store.max_phy_offset
    cq = store.consume_queues.find(topic, queue_id)
    if cq is None:
        return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0)
    min_offset, max_offset = cq.min_offset, cq.max_offset
    if max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        return GetResult(
            GetStatus.OFFSET_OVERFLOW_BADLY, min_offset if min_offset == 0 else max_offset, min_offset, max_offset
        )
    units = cq.read_units(offset, max(16000, max_msg_nums * UNIT_SIZE) // UNIT_SIZE)
    assert units is not None
    memory = TOTAL_PHYSICAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100
    commitlog = store.commitlog
    file_size = commitlog.file_size
    filt = tag_filter if tag_filter is not None and not tag_filter.match_all else None
    status = GetStatus.NO_MATCHED_MESSAGE
    records: list[bytes] = []
    total = 0
    next_phy_file_start = -1
    max_phy_pulling = 0
    n_units = len(units) // UNIT_SIZE
    i = 0
    for i in range(n_units):
        offset_py, size_py, tags_code = UNIT.unpack_from(units, i * UNIT_SIZE)
        max_phy_pulling = offset_py
        if next_phy_file_start >= 0 and offset_py < next_phy_file_start:
            continue
        in_disk = (max_offset_py - offset_py) > memory
        if records and _batch_full(cfg, size_py, max_msg_nums, total, len(records), in_disk, max_total_bytes):
            break
        if filt is not None and not filt.match_code(tags_code):
            continue
        raw = commitlog.read(offset_py, size_py)
        if raw is None:
            if not records:
                status = GetStatus.MESSAGE_WAS_REMOVING
            next_phy_file_start = offset_py + file_size - offset_py % file_size
            continue
        if filt is not None and not filt.match_tags(decode(raw).properties.get(PROPERTY_TAGS) or ""):
            continue
        records.append(raw)
        total += size_py
        status = GetStatus.FOUND
        next_phy_file_start = -1
    else:
        i = n_units
    return GetResult(
        status,
        offset + i,
        min_offset,
        max_offset,
        [memoryview(r) for r in records],
        (max_offset_py - max_phy_pulling) > memory,
        total,
        len(records),
    )


def _batch_full(cfg, size_py, max_msg_nums, total, count, in_disk, cap) -> bool:
    if max_msg_nums <= count:
        return True
    if cap > 0 and total + size_py > cap:
        return True
    if in_disk:
        return (
            total + size_py > cfg.max_transfer_bytes_on_message_in_disk
            or count > cfg.max_transfer_count_on_message_in_disk - 1
        )
    return (
        total + size_py > cfg.max_transfer_bytes_on_message_in_memory
        or count > cfg.max_transfer_count_on_message_in_memory - 1
    )
