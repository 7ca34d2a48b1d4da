"""Atomic JSON persistence: the newest complete content survives, a damaged file falls back to .bak."""

from __future__ import annotations

from common.persist import read_json, write_json_atomic


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
