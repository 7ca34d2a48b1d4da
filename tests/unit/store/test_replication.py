"""Slave side: replicated bytes in any chunking build the same consume queues as the master's."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from broker.config import BrokerRole
from broker.store.message_store import MessageStore
from broker.store.types import GetStatus, StoreOffsetMismatch
from harness.waiting import async_wait_until

from .conftest import SMALL_FILE, actual_queues, assert_queues_match_commitlog, draft, small_config


async def fill_master(master: MessageStore, rnd: random.Random, batches: int) -> None:
    for i in range(batches):
        n = rnd.randint(1, 12)
        topic = rnd.choice(["A", "B"])
        msgs = [draft(os.urandom(rnd.randint(1, 3000)), TAGS=rnd.choice(["x", "y"])) for _ in range(n)]
        if i % 7 == 3:
            msgs.append(draft(b"delayed", DELAY="2"))
        await master.put_messages(topic, rnd.randint(0, 2), msgs)


async def replicate(master: MessageStore, slave: MessageStore, rnd: random.Random, start: int = 0) -> None:
    """Copy master bytes to the slave in random chunks (split mid-record), as HA frames would."""
    offset = max(start, slave.max_phy_offset)
    while offset < master.max_phy_offset:
        sl = master.commitlog_slice(offset, rnd.choice([1, 7, 91, 500, 4096, 32768]))
        data = bytes(sl.view)
        cut = rnd.randint(0, len(data))
        for part in (data[:cut], data[cut:]):
            if part:
                offset = slave.append_replicated(offset, part)


async def wait_dispatched(slave: MessageStore) -> None:
    await async_wait_until(
        lambda: slave.dispatched_phy_offset == slave.max_phy_offset,
        5.0,
        lambda: f"slave dispatched {slave.dispatched_phy_offset} of {slave.max_phy_offset}",
        interval_s=0.01,
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_replicated_chunks_build_identical_consume_queues(tmp_path, seed, open_store):
    rnd = random.Random(seed)
    master = await open_store(small_config(tmp_path / "m"))
    slave = await open_store(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    seen = []
    slave.add_dispatch_listener(lambda t, q, m: seen.append((t, q, m)))
    for _ in range(3):
        await fill_master(master, rnd, 15)
        await replicate(master, slave, rnd)
        await wait_dispatched(slave)
        assert actual_queues(slave) == actual_queues(master)
    assert slave.max_phy_offset == master.max_phy_offset
    assert_queues_match_commitlog(slave)
    assert seen, "the slave's dispatcher notifies listeners"
    for f_m, f_s in zip(master.commitlog.files.files, slave.commitlog.files.files, strict=True):
        assert bytes(f_m.buffer[: f_m.wrote_position]) == bytes(f_s.buffer[: f_s.wrote_position])


async def test_slave_restart_keeps_replicated_data_and_queues(tmp_path, open_store):
    rnd = random.Random(5)
    master = await open_store(small_config(tmp_path / "m"))
    await fill_master(master, rnd, 20)
    slave_cfg = small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE)
    slave = await open_store(slave_cfg)
    await replicate(master, slave, rnd)
    await wait_dispatched(slave)
    await slave.kill()
    slave = await open_store(slave_cfg)
    await wait_dispatched(slave)
    assert actual_queues(slave) == actual_queues(master)


async def test_slave_starting_mid_log_pads_queues_and_answers_offset_too_small(tmp_path, open_store):
    rnd = random.Random(9)
    master = await open_store(small_config(tmp_path / "m"))
    for _ in range(150):
        await master.put_messages("A", 0, [draft(b"x" * 1000)])
    slave = await open_store(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    start = SMALL_FILE * 2
    with pytest.raises(StoreOffsetMismatch):
        slave.append_replicated(start + 5, b"abc")
    await replicate(master, slave, rnd, start=start)
    await wait_dispatched(slave)
    assert slave.min_phy_offset == start
    first_q = master.read_message(start).queue_offset
    assert slave.min_offset_in_queue("A", 0) == first_q
    assert slave.max_offset_in_queue("A", 0) == 150
    too_small = slave.get_message("g", "A", 0, 0, 1)
    assert too_small.status is GetStatus.OFFSET_TOO_SMALL
    assert too_small.next_begin_offset == 0  # a SLAVE without offsetCheckInSlave keeps the offset
    found = slave.get_message("g", "A", 0, first_q, 1)
    assert found.status is GetStatus.FOUND and found.records[0] == master.read_record(start)


async def test_replicated_bytes_at_the_wrong_offset_are_refused(tmp_path, open_store):
    master = await open_store(small_config(tmp_path / "m"))
    slave = await open_store(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    await master.put_messages("A", 0, [draft()])
    data = bytes(master.commitlog_slice(0, 1 << 20).view)
    appended = []
    slave.add_append_listener(appended.append)
    assert slave.append_replicated(0, data) == len(data)
    assert appended == [len(data)]
    with pytest.raises(StoreOffsetMismatch) as err:
        slave.append_replicated(0, data)
    assert err.value.expected == len(data) and err.value.got == 0
    with pytest.raises(RuntimeError, match="SLAVE"):
        master.append_replicated(master.max_phy_offset, data)


async def test_slave_dispatch_yields_between_bounded_rounds(tmp_path, monkeypatch, open_store):
    """A backlog is dispatched in ROUND_BYTES rounds with the loop free in between, so an HA reader sharing the
    loop appends and acks while the dispatcher catches up (long rounds delayed SYNC_MASTER acks by tens of ms)."""
    from broker.store import dispatcher

    monkeypatch.setattr(dispatcher, "ROUND_BYTES", 16 * 1024)
    cfg = {"mapped_file_size_commit_log": 1024 * 1024, "mapped_file_size_consume_queue": 20 * 4096}
    master = await open_store(small_config(tmp_path / "m", **cfg))
    slave = await open_store(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE, **cfg))
    for i in range(40):
        await master.put_messages("T", i % 2, [draft(b"x" * 1000, TAGS="a") for _ in range(20)])
    offset = 0
    while offset < master.max_phy_offset:  # all appended before the dispatcher gets the loop
        sl = master.commitlog_slice(offset, 32768)
        offset = slave.append_replicated(offset, bytes(sl.view))
    ticks, seen_at = 0, []
    while slave.dispatched_phy_offset < slave.max_phy_offset:
        await asyncio.sleep(0)
        ticks += 1
        seen_at.append(slave.dispatched_phy_offset)
    rounds = len(set(seen_at))
    assert rounds >= 800 * 1000 // (16 * 1024 + 1100) - 2, rounds  # the loop ran between every round
    assert actual_queues(slave) == actual_queues(master)
    assert_queues_match_commitlog(slave)
