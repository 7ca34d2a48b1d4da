"""A slave's dispatcher on a full disk retries every second without a line, let alone a traceback, per attempt
(issue 22 item 9): one line per minute at most, and one when it works again."""

from __future__ import annotations

import errno
import logging
import os

from broker.config import BrokerRole
from harness.waiting import async_wait_until

from .conftest import draft, small_config


async def test_a_full_disk_is_logged_once_while_the_dispatcher_retries_and_once_when_it_resumes(
    tmp_path, monkeypatch, open_store, caplog
):
    master = await open_store(small_config(tmp_path / "m"))
    slave = await open_store(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    await master.put_messages("Fresh", 0, [draft() for _ in range(3)])
    attempts = []

    def full(fd, offset, length):  # the disk: every new consume-queue block fails as on a full filesystem
        attempts.append(offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    caplog.set_level(logging.INFO, logger="broker.store.dispatcher")
    slave.append_replicated(0, bytes(master.commitlog_slice(0, master.max_phy_offset).view))
    monkeypatch.setattr(os, "posix_fallocate", full)  # no await since the append: the dispatcher has not run
    await async_wait_until(lambda: len(attempts) >= 3, 10, lambda: f"{len(attempts)} attempts")
    failures = [r for r in caplog.records if r.name == "broker.store.dispatcher"]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert "No space left on device" in failures[0].getMessage() and not failures[0].exc_info
    assert slave.dispatched_phy_offset == 0
    monkeypatch.undo()
    await async_wait_until(lambda: slave.dispatched_phy_offset == master.max_phy_offset, 10, "never dispatched")
    resumed = [r.getMessage() for r in caplog.records if r.name == "broker.store.dispatcher"][1:]
    assert len(resumed) == 1 and "resumed" in resumed[0] and "failed attempts" in resumed[0], resumed
