"""Disk space: expired files go, queues follow the new min offset, a full disk refuses writes and recovers."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from broker.config import BrokerRole
from broker.store.types import GetStatus, PutStatus
from harness.waiting import async_wait_until

from .conftest import SMALL_FILE, assert_queues_match_commitlog, draft, small_config


async def test_expired_commitlog_files_are_deleted_and_queue_min_offsets_follow(tmp_path, open_store):
    cfg = small_config(tmp_path / "s", file_reserved_time=72, delete_when="99", mapped_file_size_consume_queue=20 * 16)
    s = await open_store(cfg)
    for i in range(200):  # ~3.3 files of 64 KiB
        await s.put_messages("T", i % 2, [draft(b"x" * 1000)])
    files = list(s.commitlog.files.files)
    assert len(files) >= 4
    old = time.time() - 100 * 3600
    for mf in files[:2]:
        os.utime(mf.path, (old, old))
    cleanup = s.cleanup
    s.disk.used_ratio = lambda: 0.10  # the host disk's real usage must not decide this test (75% deletes)
    assert cleanup.run_once() == 0  # expired, but not the hour in deleteWhen and the disk is not full
    cleanup.manual_delete = True
    assert cleanup.run_once() == 2
    assert s.min_phy_offset == 2 * SMALL_FILE
    assert not files[0].path.exists() and files[2].path.exists()
    first = s.min_offset_in_queue("T", 0)
    assert first > 0
    cq_start = s.consume_queues.find("T", 0).files.files[0].start_offset
    assert 0 < cq_start <= first * 20, "consume-queue files wholly below the commitlog min are deleted"
    assert s.get_message("g", "T", 0, 0, 1).status is GetStatus.OFFSET_TOO_SMALL
    assert s.read_message(s.consume_queues.find("T", 0).unit(first)[0]).queue_offset == first
    assert_queues_match_commitlog(s)
    assert (await s.put_messages("T", 0, [draft()])).status is PutStatus.PUT_OK


async def test_the_file_being_written_is_never_deleted(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", file_reserved_time=0))
    await s.put_messages("T", 0, [draft()])
    old = time.time() - 10 * 3600
    os.utime(s.commitlog.files.last.path, (old, old))
    s.cleanup.manual_delete = True
    assert s.cleanup.run_once() == 0
    assert s.max_offset_in_queue("T", 0) == 1


async def test_disk_pressure_deletes_unexpired_files_until_under_the_forcible_ratio(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", file_reserved_time=72, delete_when="99"))
    for i in range(200):  # ~3.3 files of 64 KiB, none expired
        await s.put_messages("T", i % 2, [draft(b"x" * 1000)])
    assert len(s.commitlog.files.files) >= 4
    forcibly = s.config.disk_space_clean_forcibly_ratio / 100
    ratios = iter([forcibly + 0.02, forcibly - 0.01])  # read after each deleted file
    s.disk.used_ratio = lambda: next(ratios, forcibly - 0.01)
    assert s.cleanup.delete_commitlog_files(force=True) == 2  # stops once back under the ratio
    assert s.min_phy_offset == 2 * SMALL_FILE


async def test_a_slave_under_disk_pressure_keeps_unexpired_files(tmp_path, open_store):
    """A slave's copy is what a SYNC_MASTER's SEND_OK promised: disk pressure never deletes it before it expires."""
    root = tmp_path / "s"
    master = await open_store(small_config(root, file_reserved_time=72, delete_when="99"))
    for i in range(200):  # ~3.3 files of 64 KiB, none expired
        await master.put_messages("T", i % 2, [draft(b"x" * 1000)])
    await master.stop()
    slave = await open_store(small_config(root, file_reserved_time=72, delete_when="99", broker_role=BrokerRole.SLAVE))
    files = len(slave.commitlog.files.files)
    slave.disk.used_ratio = lambda: 0.99  # far above diskSpaceCleanForciblyRatio (85 %)
    assert slave.cleanup.run_once() == 0
    assert len(slave.commitlog.files.files) == files and slave.min_phy_offset == 0
    old = time.time() - 100 * 3600
    os.utime(slave.commitlog.files.files[0].path, (old, old))
    assert slave.cleanup.run_once() == 1, "an expired file still goes"


async def test_disk_over_the_warning_level_refuses_writes_and_writes_nothing(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", disk_space_warning_level_ratio=1))
    # Any real partition holding this test is more than 1% used.
    s.cleanup.run_once()
    assert s.disk_full
    before = s.max_phy_offset
    res = await s.put_messages("T", 0, [draft()])
    assert res.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "diskSpaceWarningLevelRatio=1%" in res.remark and "free space" in res.remark
    assert s.max_phy_offset == before
    assert s.runtime_info()["diskFull"] == "true"


@pytest.fixture
def tiny_tmpfs(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]
    proc = subprocess.run(mount, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


async def test_a_really_full_disk_refuses_writes_then_resumes_when_space_returns(tiny_tmpfs: Path, open_store):
    cfg = small_config(
        tiny_tmpfs / "store",
        mapped_file_size_commit_log=128 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        disk_space_warning_level_ratio=100,
    )
    s = await open_store(cfg)
    assert (await s.put_messages("T", 0, [draft(b"first")])).status is PutStatus.PUT_OK
    junk = tiny_tmpfs / "junk"
    fd = os.open(junk, os.O_WRONLY | os.O_CREAT)
    try:  # take all the remaining space
        while True:
            os.write(fd, b"\1" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    statuses = []
    for _ in range(200):  # about 2 files of records: the next file cannot be created
        res = await s.put_messages("T", 0, [draft(b"y" * 1000)])
        statuses.append(res.status)
        if res.status is not PutStatus.PUT_OK:
            break
    assert statuses[-1] is PutStatus.CREATE_MAPPED_FILE_FAILED
    refused = await s.put_messages("T", 0, [draft(b"z")])
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and "no space" in refused.remark
    assert s.disk_full
    count = s.max_offset_in_queue("T", 0)
    junk.unlink()

    async def accepted():
        return (await s.put_messages("T", 0, [draft(b"again")])).status is PutStatus.PUT_OK

    await async_wait_until(accepted, 5.0, "the store to accept writes after space was freed", interval_s=0.05)
    assert not s.disk_full and s.max_offset_in_queue("T", 0) == count + 1
    assert_queues_match_commitlog(s)
