"""Consume-queue files cost what they hold (issue 12 item 4): 2,000 one-message topics took 12 GB of preallocated
consume-queue files and 4,000 descriptors. Files are now sparse with blocks reserved ahead of the writes, and at
most ``maxOpenConsumeQueueFiles`` stay open (idle ones are parked and reopened on use)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from broker.store.consume_queue import UNIT, UNIT_SIZE
from broker.store.message_store import MessageStore
from broker.store.types import GetStatus, PutStatus
from common import fd_limit
from remoting.message_codec import iter_records

from .conftest import assert_queues_match_commitlog, draft, small_config

TOPICS = 500
OPEN_LIMIT = 16
CQ_FILE = 300_000 * 20  # RocketMQ's (and pyrmq's) default: 6 MB per consume-queue file


def allocated_bytes(directory: Path) -> int:
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, files in os.walk(directory) for f in files)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def many_queue_config(root: Path, **kw):
    return small_config(root, mapped_file_size_consume_queue=CQ_FILE, max_open_consume_queue_files=OPEN_LIMIT,
                        mapped_file_size_commit_log=1024 * 1024, **kw)


async def put_one_per_topic(store: MessageStore, count: int) -> None:
    for i in range(count):
        res = await store.put_messages(f"auto-{i}", i % 8, [draft(b"only %d" % i)])
        assert res.status is PutStatus.PUT_OK and res.queue_offset == 0


async def test_many_one_message_topics_cost_a_block_each_and_a_bounded_number_of_descriptors(tmp_path, open_store):
    fds_before = open_fds()
    store = await open_store(many_queue_config(tmp_path / "store"))
    await put_one_per_topic(store, TOPICS)
    # Preallocated, this was TOPICS x 6 MB = 3 GB; sparse with a one-page reservation it is one block each.
    cq_bytes = allocated_bytes(store.config.consume_queue_dir)
    assert cq_bytes <= TOPICS * 2 * 4096, cq_bytes
    # Two descriptors per open consume-queue file, at most OPEN_LIMIT of them (was 2 x TOPICS).
    assert int(store.runtime_info()["consumeQueueOpenFiles"]) <= OPEN_LIMIT
    assert open_fds() - fds_before <= 2 * OPEN_LIMIT + 16
    for i in range(TOPICS):  # every queue still reads back, reopening its file on demand
        got = store.get_message("g", f"auto-{i}", i % 8, 0, 4)
        assert got.status is GetStatus.FOUND
        assert [m.body for m in iter_records(b"".join(got.records))] == [b"only %d" % i]
    assert open_fds() - fds_before <= 2 * OPEN_LIMIT + 16


async def test_a_restart_with_many_queues_opens_them_lazily_and_recovers_every_one(tmp_path, open_store):
    config = many_queue_config(tmp_path / "store")
    store = await open_store(config)
    await put_one_per_topic(store, 200)
    await store.kill()  # crash: recovery reads and truncates the queues, within the bound
    fds_before = open_fds()
    store = await open_store(config)
    assert open_fds() - fds_before <= 2 * OPEN_LIMIT + 16
    assert_queues_match_commitlog(store)
    res = await store.put_messages("auto-7", 7, [draft(b"second")])
    assert (res.status, res.queue_offset) == (PutStatus.PUT_OK, 1)
    assert open_fds() - fds_before <= 2 * OPEN_LIMIT + 16


async def test_parking_a_consume_queue_file_never_invalidates_a_view_already_handed_out(tmp_path, open_store):
    store = await open_store(small_config(tmp_path / "store", max_open_consume_queue_files=1))
    await store.put_messages("A", 0, [draft(b"a0"), draft(b"a1")])
    cq = store.consume_queues.find("A", 0)
    units = cq.read_units(0, 2)  # a view of A's consume-queue mapping
    before = bytes(units)
    await store.put_messages("B", 0, [draft(b"b0")])  # opening B's file parks A's (limit 1)
    assert cq.files.last.parked
    assert bytes(units) == before and UNIT.unpack_from(units, UNIT_SIZE)[1] > 0
    got = store.get_message("g", "A", 0, 0, 8)  # and A reopens on the next read
    assert [m.body for m in iter_records(b"".join(got.records))] == [b"a0", b"a1"]


async def test_a_parked_file_with_unflushed_units_is_flushed_through_a_temporary_descriptor(tmp_path, open_store):
    store = await open_store(small_config(tmp_path / "store", max_open_consume_queue_files=1))
    await store.put_messages("A", 0, [draft()])
    await store.put_messages("B", 0, [draft()])
    cq = store.consume_queues.find("A", 0)
    assert cq.files.last.parked and cq.dirty_bytes() == UNIT_SIZE
    cq.flush_sync()
    assert cq.dirty_bytes() == 0 and cq.files.last.parked  # flushing did not reopen it


async def test_no_space_for_a_consume_queue_block_refuses_the_put_before_any_byte_is_written(
    tmp_path, monkeypatch, open_store
):
    store = await open_store(small_config(tmp_path / "store"))
    try:
        end = store.max_phy_offset

        def full(fd, offset, length):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "posix_fallocate", full)
        res = await store.put_messages("Fresh", 0, [draft()])
        assert res.status is PutStatus.CREATE_MAPPED_FILE_FAILED and "space" in res.remark
        assert store.max_phy_offset == end and store.max_offset_in_queue("Fresh", 0) == 0
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("units", [1, 204, 205, 5000])
async def test_blocks_are_reserved_ahead_of_the_writes_in_growing_steps(tmp_path, units, open_store):
    store = await open_store(small_config(tmp_path / "store", mapped_file_size_consume_queue=CQ_FILE))
    for start in range(0, units, 100):
        n = min(100, units - start)
        assert (await store.put_messages("T", 0, [draft()] * n)).status is PutStatus.PUT_OK
    mf = store.consume_queues.find("T", 0).files.last
    assert mf.wrote_position == units * UNIT_SIZE <= mf.allocated_position
    assert os.stat(mf.path).st_blocks * 512 >= mf.allocated_position
    # Never more than one step ahead: the data, doubled, rounded to a page (min 4 KiB, max 1 MiB).
    assert mf.allocated_position <= max(2 * units * UNIT_SIZE + 2 * 4096, 4096)
    assert_queues_match_commitlog(store)


async def test_by_default_the_open_file_bound_follows_the_descriptor_limit_and_active_queues_are_not_reopened(
        tmp_path, open_store):
    # 100 topics of 8 queues written in turn: with the old fixed bound of 256 files every put parked one file and
    # reopened another (bench.scaling --sweep topics: 2.8k msg/s against 6.5k above the working set)
    store = await open_store(small_config(tmp_path / "store", mapped_file_size_consume_queue=CQ_FILE,
                                          max_open_consume_queue_files=0))
    open_now, limit, parked = store.consume_queue_files()
    assert limit == fd_limit.current_budget() and limit >= fd_limit.MIN_FILES
    queues = [(f"T{i // 8}", i % 8) for i in range(min(800, limit))]
    for _ in range(3):
        for topic, queue_id in queues:
            assert (await store.put_messages(topic, queue_id, [draft(b"x")])).status is PutStatus.PUT_OK
    assert store.consume_queue_files() == (len(queues), limit, 0)


def resident_per_mapping(word: str) -> list[int]:
    """Resident bytes of each of this process's mappings whose path holds ``word`` (from /proc/self/smaps)."""
    out, inside = [], False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            parts = line.split()
            if "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's header line
                inside = len(parts) > 5 and word in parts[5]
            elif inside and parts[0] == "Rss:":
                out.append(int(parts[1]) * 1024)
    return out


async def test_a_queue_costs_a_page_of_its_mapping_and_a_few_kib_of_python_heap(tmp_path, open_store):
    # bench.scaling's 1,000 topics x 8 queues: what each queue costs the broker beyond its data. A queue written and
    # read once keeps one resident page of its 6 MB mapping (writes are pwrites, the reservation is fallocate: only
    # the read touches the mapping) and about 2 KiB of Python objects (queue, file, paths). The index is off: its
    # pending offers are bounded on their own (MAX_OFFERED_BYTES) and are per message, not per queue.
    import gc
    import tracemalloc

    store = await open_store(small_config(tmp_path / "store", mapped_file_size_consume_queue=CQ_FILE,
                                          max_open_consume_queue_files=4096, message_index_enable=False))
    await store.put_messages("warm", 0, [draft(b"x")])
    queues = [(f"T{i // 8}", i % 8) for i in range(2000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for topic, queue_id in queues:
            assert (await store.put_messages(topic, queue_id, [draft(b"x" * 100)])).status is PutStatus.PUT_OK
            assert store.get_message("g", topic, queue_id, 0, 4).status is GetStatus.FOUND
        gc.collect()
        heap_per_queue = (tracemalloc.get_traced_memory()[0] - before) / len(queues)
    finally:
        tracemalloc.stop()
    assert heap_per_queue < 8 * 1024, heap_per_queue
    resident = resident_per_mapping(str(store.config.consume_queue_dir))
    assert len(resident) == len(queues) + 1
    assert max(resident) <= 2 * 4096, max(resident)
    assert sum(resident) <= (len(queues) + 1) * 4096 * 1.1, sum(resident)
