"""Atomic JSON persistence: the newest complete content survives, a damaged file falls back to .bak; the batched
writer shares one write among the changes of an interval and among concurrent flushes."""

from __future__ import annotations

import asyncio
import os

import pytest

from common.persist import BatchedJsonWriter, read_json, write_json_atomic
from harness.waiting import async_wait_until


def test_a_written_file_reads_back(tmp_path):
    path = tmp_path / "config" / "topics.json"
    write_json_atomic(path, {"a": 1})
    assert read_json(path) == {"a": 1}
    assert not path.with_name("topics.json.tmp").exists()


def test_the_previous_content_is_kept_as_backup(tmp_path):
    path = tmp_path / "offsets.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    assert read_json(path) == {"v": 2}
    assert read_json(path.with_name("offsets.json.bak")) == {"v": 1}


def test_an_empty_or_garbled_main_file_falls_back_to_the_backup(tmp_path):
    path = tmp_path / "offsets.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    path.write_text("")
    assert read_json(path) == {"v": 1}
    path.write_text('{"v": ')
    assert read_json(path) == {"v": 1}


def test_a_crash_between_the_two_renames_still_loads_the_old_content(tmp_path):
    path = tmp_path / "offsets.json"
    write_json_atomic(path, {"v": 1})
    path.rename(path.with_name("offsets.json.bak"))  # state right after the first rename
    assert read_json(path) == {"v": 1}


def test_missing_files_give_the_default(tmp_path):
    assert read_json(tmp_path / "none.json", default={}) == {}


# BatchedJsonWriter: real files, real event loop ------------------------------------------------------------------


def table_writer(path, table: dict, interval_s: float) -> BatchedJsonWriter:
    return BatchedJsonWriter(path, lambda: (lambda snap=dict(table): snap), min_interval_s=interval_s)


async def test_changes_within_the_interval_share_one_write_and_flush_does_not_wait_for_the_interval(tmp_path):
    path, table = tmp_path / "groups.json", {}
    writer = table_writer(path, table, interval_s=600)
    for i in range(1000):
        table[f"g{i}"] = i
        writer.changed()
    await async_wait_until(lambda: writer.writes == 1, 10, "the first change was not written at once")
    assert len(read_json(path)) == 1000 and not writer.dirty  # the one write carried all 1,000 changes

    table["late"] = 1
    writer.changed()
    await asyncio.sleep(0.2)
    assert writer.writes == 1 and writer.dirty  # the interval holds the next scheduled write back
    await writer.flush()  # an explicit change does not wait for it
    assert writer.writes == 2 and read_json(path)["late"] == 1
    await writer.close()
    assert writer.writes == 2  # nothing was pending


async def test_concurrent_flushes_share_writes_and_close_writes_what_is_pending(tmp_path):
    path, table = tmp_path / "kv.json", {}
    writer = table_writer(path, table, interval_s=600)

    async def put(i: int) -> None:
        table[f"k{i}"] = i
        writer.changed()
        await writer.flush()

    await asyncio.gather(*(put(i) for i in range(500)))
    assert len(read_json(path)) == 500
    assert writer.writes <= 2, writer.writes  # the first put's write, then one for every put made during it
    table["pending"] = 1
    writer.changed()
    await writer.close()
    assert read_json(path)["pending"] == 1


async def test_a_failed_write_reaches_the_flush_and_the_change_stays_pending(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    writer = table_writer(blocker / "t.json", {"a": 1}, interval_s=0)
    writer.changed()
    with pytest.raises(OSError):
        await writer.flush()
    assert writer.dirty and writer.failures >= 1 and writer.writes == 0
    with pytest.raises(OSError):
        await writer.close()  # a graceful stop reports it too (the caller logs it)



def test_a_private_file_is_the_owners_alone_and_a_plain_one_follows_the_umask(tmp_path):
    secret, plain = tmp_path / "auth.json", tmp_path / "topics.json"
    for _ in range(2):  # the first write creates, the second replaces (and keeps a .bak)
        write_json_atomic(secret, {"users": []}, private=True)
        write_json_atomic(plain, {})
    assert secret.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "auth.json.bak").stat().st_mode & 0o777 == 0o600
    umask = os.umask(0)
    os.umask(umask)
    assert plain.stat().st_mode & 0o777 == 0o666 & ~umask
