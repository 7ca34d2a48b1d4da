"""Every directory a broker writes is locked (issue 12 item 5): the store root was, but ``storePathCommitLog`` was
not, and two brokers sharing a commitlog both answered SEND_OK at the same offset, losing a message."""

from __future__ import annotations

import os

import pytest

from broker.store.checkpoint import LOCK_FILE
from broker.store.message_store import MessageStore, StoreLockedError
from broker.store.types import PutStatus

from .conftest import draft, small_config


async def test_a_store_sharing_another_stores_commitlog_directory_is_refused_naming_it_and_the_holder(tmp_path):
    first = MessageStore(small_config(tmp_path / "a"))
    await first.start()
    try:
        shared = first.config.commitlog_dir
        second = MessageStore(small_config(tmp_path / "b", store_path_commit_log=str(shared)))
        with pytest.raises(StoreLockedError) as err:
            await second.start()
        text = str(err.value)
        assert str(shared) in text and f"pid={os.getpid()}" in text and str(tmp_path / "a") in text
        # All or nothing: the refused store holds none of its own locks afterwards.
        third = MessageStore(small_config(tmp_path / "b"))
        await third.start()
        await third.stop()
        assert (await first.put_messages("T", 0, [draft()])).status is PutStatus.PUT_OK
    finally:
        await first.stop()


async def test_a_commitlog_directory_pointing_at_another_stores_root_is_refused(tmp_path):
    first = MessageStore(small_config(tmp_path / "a"))
    await first.start()
    try:
        second = MessageStore(small_config(tmp_path / "b", store_path_commit_log=str(tmp_path / "a")))
        with pytest.raises(StoreLockedError, match="belongs to another running broker"):
            await second.start()
    finally:
        await first.stop()


async def test_a_root_inside_another_stores_tree_is_refused(tmp_path):
    first = MessageStore(small_config(tmp_path / "a", store_path_commit_log=str(tmp_path / "cl")))
    await first.start()
    try:
        for root in (tmp_path / "cl", tmp_path / "a" / "consumequeue", tmp_path / "a" / "config"):
            with pytest.raises(StoreLockedError, match=str(root)):
                await MessageStore(small_config(root)).start()
    finally:
        await first.stop()


async def test_the_locks_cover_root_commitlog_queues_and_config_and_go_away_at_stop(tmp_path):
    config = small_config(tmp_path / "a", store_path_commit_log=str(tmp_path / "elsewhere" / "cl"))
    store = MessageStore(config)
    await store.start()
    expected = [config.root_dir, config.commitlog_dir, config.consume_queue_dir, config.config_dir]
    assert store.lock_paths == [d / LOCK_FILE for d in expected]
    await store.put_messages("T", 0, [draft()])
    await store.stop()
    again = MessageStore(config)
    await again.start()  # a clean stop released every lock; the lock file is not mistaken for a commitlog file
    assert again.max_offset_in_queue("T", 0) == 1
    await again.stop()


async def test_a_store_locked_but_never_started_releases_its_locks_at_stop(tmp_path):
    config = small_config(tmp_path / "a")
    store = MessageStore(config)
    store.lock()
    with pytest.raises(StoreLockedError):
        MessageStore(config).lock()
    await store.stop()
    other = MessageStore(config)
    other.lock()
    other.unlock()
