"""Flushing: SYNC_FLUSH group commit shares fdatasyncs; ASYNC_FLUSH moves the flushed offset in the background."""

from __future__ import annotations

import asyncio
import os
import threading

from broker.config import FlushDiskType
from broker.store.flush import GroupCommitService, PeriodicFlushService
from broker.store.types import PutStatus
from harness.waiting import async_wait_until

from .conftest import draft, small_config


async def test_sync_flush_group_commit_shares_fdatasync_between_concurrent_puts(tmp_path, monkeypatch, open_store):
    calls = []
    real = os.fdatasync

    def counting(fd):
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    s = await open_store(
        small_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=4 << 20)
    )
    calls.clear()
    puts = 400
    results = await asyncio.gather(*(s.put_messages("T", i % 4, [draft(b"x" * 200)]) for i in range(puts)))
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert s.flushed_phy_offset >= max(r.next_offset for r in results)
    commitlog_syncs = s.group_commit.syncs
    assert 0 < commitlog_syncs < puts / 2, f"{commitlog_syncs} group commits for {puts} puts"
    assert len(calls) < puts


async def test_sync_flush_times_out_with_flush_disk_timeout_but_keeps_the_message(tmp_path, monkeypatch, open_store):
    s = await open_store(
        small_config(
            tmp_path / "s",
            flush_disk_type=FlushDiskType.SYNC_FLUSH,
            sync_flush_timeout=100,
            flush_interval_consume_queue=60_000,
        )
    )
    await s.put_messages("T", 0, [draft(b"warm-up")])  # files exist: only the disk sync is slow below
    release = threading.Event()
    real = os.fdatasync

    def slow_disk(fd):
        release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_disk)
    try:
        res = await s.put_messages("T", 0, [draft(b"slow disk")])
        assert res.status is PutStatus.FLUSH_DISK_TIMEOUT and "syncFlushTimeout=100" in res.remark
        assert res.status.stored and s.max_offset_in_queue("T", 0) == 2
        skip = await s.put_messages("T", 0, [draft(b"no wait", WAIT="false")])
        assert skip.status is PutStatus.PUT_OK
    finally:
        release.set()


async def test_async_flush_reaches_the_write_offset_in_the_background(tmp_path, open_store):
    s = await open_store(
        small_config(tmp_path / "s", flush_interval_commit_log=10, flush_commit_log_thorough_interval=20)
    )
    await s.put_messages("T", 0, [draft(b"x" * 100)])
    assert s.flushed_phy_offset < s.max_phy_offset  # below the least-pages threshold: not flushed at once
    await async_wait_until(
        lambda: s.flushed_phy_offset == s.max_phy_offset,
        5.0,
        lambda: f"flushed {s.flushed_phy_offset} of {s.max_phy_offset}",
        interval_s=0.01,
    )


async def test_stop_flushes_everything_and_writes_the_checkpoint(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", flush_interval_commit_log=60_000))
    res = await s.put_messages("T", 0, [draft()])
    await s.stop()
    assert s.flushed_phy_offset == s.max_phy_offset
    data = (tmp_path / "s" / "checkpoint").read_bytes()
    assert int.from_bytes(data[0:8], "big") == res.store_timestamp
    assert int.from_bytes(data[8:16], "big") == res.store_timestamp


async def test_sync_flush_and_replica_wait_run_together_and_the_replica_status_wins(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH))
    seen = []

    async def waiter(next_offset):
        seen.append((next_offset, s.flushed_phy_offset))
        return PutStatus.SLAVE_NOT_AVAILABLE, "no slave connected"

    s.set_replica_waiter(waiter)
    res = await s.put_messages("T", 0, [draft()])
    assert res.status is PutStatus.SLAVE_NOT_AVAILABLE and res.remark == "no slave connected"
    assert s.flushed_phy_offset >= res.next_offset and seen[0][0] == res.next_offset


async def test_a_senders_deadline_before_sync_flush_timeout_answers_flush_disk_timeout_then():
    release = asyncio.Event()

    async def stuck_disk(target: int) -> int:
        await release.wait()
        return target

    gc = GroupCommitService(lambda: 100, lambda: 0, stuck_disk, timeout_ms=60_000)
    await gc.start()
    try:
        loop = asyncio.get_running_loop()
        status, remark = await asyncio.wait_for(gc.wait_flushed(100, loop.time() + 0.05), 5)
        assert status is PutStatus.FLUSH_DISK_TIMEOUT and "the sender's deadline" in remark
    finally:
        release.set()


class _CountingTasks:
    """The event loop's task factory, counting the tasks it makes (the flush loops should make none per wakeup)."""

    def __init__(self) -> None:
        self.made = 0

    def __call__(self, loop, coro, **kwargs):
        self.made += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    def __enter__(self):
        self.loop = asyncio.get_running_loop()
        self.loop.set_task_factory(self)
        return self

    def __exit__(self, *exc) -> None:
        self.loop.set_task_factory(None)


async def test_the_periodic_flush_makes_no_task_per_tick_and_stops_at_once():
    runs = []

    async def flush(least_bytes: int, thorough: bool) -> None:
        runs.append(thorough)

    svc = PeriodicFlushService("t", flush, interval_ms=1, least_pages=4, thorough_interval_ms=5)
    with _CountingTasks() as tasks:
        await svc.start()
        await async_wait_until(lambda: len(runs) >= 50, 5.0, lambda: f"{len(runs)} flushes", interval_s=0.01)
        made = tasks.made
    assert made <= 1, f"{made} tasks for {len(runs)} flushes"  # the loop itself
    assert any(runs) and not all(runs)  # thorough every 5 ms, least-pages runs in between
    loop = asyncio.get_running_loop()
    began = loop.time()
    await svc.stop(timeout_s=5.0)
    assert loop.time() - began < 1.0  # the stop event ends the sleep, not the drain's timeout


async def test_group_commit_wakes_at_once_for_each_put_without_a_task_per_wakeup():
    flushed = 0
    targets = []

    async def flush_to(target: int) -> int:
        nonlocal flushed
        targets.append(target)
        flushed = target
        return target

    offset = 0
    gc = GroupCommitService(lambda: offset, lambda: flushed, flush_to, timeout_ms=60_000)
    with _CountingTasks() as tasks:
        await gc.start()
        for _ in range(100):  # each put finds the loop idle: one wakeup each
            offset += 10
            status, _ = await gc.wait_flushed(offset)  # pytest-timeout bounds a put never answered
            assert status is PutStatus.PUT_OK
        made = tasks.made
    assert made <= 1, f"{made} tasks for 100 wakeups"  # the loop itself
    assert targets == list(range(10, 1001, 10))
    loop = asyncio.get_running_loop()
    began = loop.time()
    await gc.stop(timeout_s=5.0)
    assert loop.time() - began < 1.0
