"""Recovery: torn and garbage tails after a crash or a clean stop end the log at the last good record."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from broker.store.message_store import MessageStore
from broker.store.types import GetStatus, PutStatus
from remoting.message_codec import iter_records

from .conftest import SMALL_FILE, assert_queues_match_commitlog, draft, small_config


async def build(root: Path, *, crash: bool, batches: int = 5) -> tuple[list[int], int]:
    """A store with a few batches over two queues; returns (record offsets, end) and leaves it stopped/killed."""
    s = MessageStore(small_config(root))
    await s.start()
    offsets = []
    for i in range(batches):
        res = await s.put_messages("T", i % 2, [draft(f"body-{i}-{j}".encode(), TAGS=f"t{j}") for j in range(3)])
        offsets += res.physical_offsets
    end = s.max_phy_offset
    if crash:
        await s.kill()
    else:
        await s.stop()
    return offsets, end


def overwrite(root: Path, offset: int, data: bytes) -> None:
    start = offset - offset % SMALL_FILE
    path = root / "commitlog" / f"{start:020d}"
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset - start)
    finally:
        os.close(fd)


async def reopen_and_check(root: Path, expected_end: int, expected_count: int) -> None:
    s = MessageStore(small_config(root))
    await s.start()
    try:
        assert s.max_phy_offset == expected_end
        assert_queues_match_commitlog(s)
        total = s.max_offset_in_queue("T", 0) + s.max_offset_in_queue("T", 1)
        assert total == expected_count
        res = await s.put_messages("T", 0, [draft(b"after-recovery")])
        assert res.status is PutStatus.PUT_OK and res.wrote_offset == expected_end
        got = s.get_message("g", "T", 0, res.queue_offset, 1)
        assert got.status is GetStatus.FOUND
        assert next(iter_records(got.records[0], check_crc=True)).body == b"after-recovery"
        assert_queues_match_commitlog(s)
    finally:
        await s.kill()  # the directory is thrown away: skip the final fsyncs


@pytest.mark.parametrize("crash", [True, False], ids=["after-crash", "after-clean-stop"])
async def test_tail_cut_at_every_byte_of_the_last_record_ends_at_the_previous_record(tmp_path, crash):
    template = tmp_path / "template"
    offsets, end = await build(template, crash=crash)
    last = offsets[-1]
    for cut in range(last, end):
        root = tmp_path / f"cut{cut}"
        shutil.copytree(template, root)
        overwrite(root, cut, bytes(end - cut))  # the bytes after `cut` never reached the disk
        await reopen_and_check(root, last, len(offsets) - 1)
        shutil.rmtree(root)


@pytest.mark.parametrize("garbage", ["zeros", "ones", "random"])
@pytest.mark.parametrize("crash", [True, False], ids=["after-crash", "after-clean-stop"])
async def test_garbage_over_the_last_record_or_after_the_end_is_cut_off(tmp_path, garbage, crash):
    rnd = random.Random(7)
    template = tmp_path / "template"
    offsets, end = await build(template, crash=crash)
    last = offsets[-1]
    fill = {"zeros": lambda n: bytes(n), "ones": lambda n: b"\xff" * n, "random": rnd.randbytes}[garbage]
    # 1) garbage replacing the tail half of the last record
    root = tmp_path / "over"
    shutil.copytree(template, root)
    mid = last + (end - last) // 2
    overwrite(root, mid, fill(end - mid))
    await reopen_and_check(root, last, len(offsets) - 1)
    # 2) garbage after the last record: everything stays
    root = tmp_path / "after"
    shutil.copytree(template, root)
    overwrite(root, end, fill(300))
    await reopen_and_check(root, end, len(offsets))


async def test_a_corrupt_record_in_an_older_file_drops_everything_after_it(tmp_path, open_store):
    root = tmp_path / "s"
    s = await open_store(small_config(root))
    offsets = []
    for _ in range(100):  # ~1.6 files of 64 KiB
        offsets += (await s.put_messages("T", 0, [draft(b"x" * 1000)])).physical_offsets
    await s.kill()
    victim = offsets[10]
    overwrite(root, victim + 100, b"\x00\xff" * 8)  # body bytes: only the CRC check can tell
    await reopen_and_check(root, victim, 10)
    assert not (root / "commitlog" / f"{SMALL_FILE:020d}").exists()


async def test_lost_consume_queues_are_rebuilt_from_the_commitlog(tmp_path):
    for crash in (True, False):
        root = tmp_path / f"s{crash}"
        offsets, end = await build(root, crash=crash, batches=8)
        shutil.rmtree(root / "consumequeue")
        await reopen_and_check(root, end, len(offsets))


async def test_consume_queue_ahead_of_a_cut_commitlog_is_truncated(tmp_path):
    root = tmp_path / "s"
    offsets, end = await build(root, crash=True)
    overwrite(root, offsets[-3], bytes(end - offsets[-3]))  # the whole last batch is gone
    await reopen_and_check(root, offsets[-3], len(offsets) - 3)


async def test_abort_marker_exists_while_running_and_goes_on_clean_stop(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s"))
    assert (tmp_path / "s" / "abort").exists()
    await s.stop()
    assert not (tmp_path / "s" / "abort").exists()
    assert (tmp_path / "s" / "checkpoint").stat().st_size == 4096


async def test_recovery_after_crash_with_an_empty_commitlog(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s"))
    await s.kill()
    again = await open_store(small_config(tmp_path / "s"))
    assert again.max_phy_offset == 0
    assert (await again.put_messages("T", 0, [draft()])).status is PutStatus.PUT_OK


async def test_files_prepared_for_a_batch_that_never_came_are_dropped_on_recovery(tmp_path, open_store):
    root = tmp_path / "s"
    cfg = small_config(root)
    s = await open_store(cfg)
    await s.put_messages("T", 0, [draft()])
    cq = s.consume_queues.find("T", 0)
    # A crash between preparing consume-queue files for a huge batch and writing it.
    await cq.prepare(1, 64 * 5, s.consume_queues.run_disk)
    ready = list(cq._ready)
    cq._ready.clear()  # as if the process died here: the files stay on disk
    end = s.max_phy_offset
    await s.kill()
    assert all(mf.path.exists() for mf in ready)
    again = await open_store(cfg)
    assert again.max_phy_offset == end and again.max_offset_in_queue("T", 0) == 1
    res = await again.put_messages("T", 0, [draft(b"next")])
    assert res.queue_offset == 1
    assert_queues_match_commitlog(again)


async def test_crash_recovery_starts_at_the_file_the_checkpoint_vouches_for(tmp_path, monkeypatch, open_store):
    from broker.store import put as put_path
    from broker.store.dispatcher import Dispatcher

    clock = [1_000_000]
    monkeypatch.setattr(put_path, "now_ms", lambda: clock[0])
    root = tmp_path / "s"
    cfg = small_config(root)
    s = await open_store(cfg)
    for _ in range(3):  # three files, 10 s of store time apart
        for _ in range(55):
            await s.put_messages("T", 0, [draft(b"x" * 1000)])
        clock[0] += 10_000
    await s.stop()  # checkpoint: last store time
    s = await open_store(cfg)
    clock[0] += 10_000
    for _ in range(60):  # a fourth file, newer than the checkpoint
        await s.put_messages("T", 0, [draft(b"y" * 1000)])
    end = s.max_phy_offset
    files = [mf.start_offset for mf in s.commitlog.files.files]
    await s.kill()
    begins = []
    real = Dispatcher.dispatch

    async def spy(self, begin, stop):
        begins.append(begin)
        return await real(self, begin, stop)

    monkeypatch.setattr(Dispatcher, "dispatch", spy)
    again = await open_store(cfg)
    # 60 records fill a file, so file 1 starts with store time +10 s and file 2 with +20 s, the checkpoint's
    # time. min = checkpoint - 3 s: the newest file whose first record is that old is file 1.
    assert len(files) == 4 and begins == [files[1]]
    assert again.max_phy_offset == end
    assert_queues_match_commitlog(again)
