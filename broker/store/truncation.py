"""Crash-safe truncation of a store's log: a demoted master cutting what the new master never had (spec §9.5).

In controller mode a master that lost its role may hold a tail that no member of the SyncStateSet acknowledged
(nothing in it was answered SEND_OK with ``allAckInSyncStateSet``). Before it streams from the new master it cuts
its log back to the last offset both histories agree on (``epoch_file.consistent_offset``). RocketMQ resets only
in-memory positions and leaves the stale tail valid on disk, so a crash revives it (apache/rocketmq #10666). Here:

1. ``request`` (store stopped) writes ``<storePathRootDir>/truncatePending`` atomically: the target offset. Until
   that file is durable nothing has changed; a crash leaves the store as it was.
2. The next start's recovery (``recovery.load_and_recover``) finds the marker and, after its normal scan, ``apply``
   runs: check that the target is a record boundary, cut the commitlog there (later files deleted, the tail of the
   last zeroed, all fsynced, the directory too), cut every consume queue back to it (fsynced), cut the epoch
   history, and only then remove the marker (directory fsynced).

Every action of step 2 is idempotent and the marker outlives them all, so a crash at any point repeats step 2 at
the next start: the store always recovers to a consistent prefix, ``[min, end)`` before the marker is durable and
``[min, target)`` after it. A target beyond the recovered end (a tail the crash already lost) cuts at the end.

Marker layout (text, ASCII): ``<target offset>\\n``. Blocking throughout: the store's disk executor runs it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from broker.store.commitlog import CommitLog
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.epoch_file import EpochFile
from common.errors import PyrmqError
from common.persist import fsync_dir, write_bytes_atomic
from remoting.message_codec import RecordStatus

log = logging.getLogger(__name__)

MARKER = "truncatePending"


class TruncationError(PyrmqError):
    """A pending truncation that cannot be applied; the store refuses to start rather than serve a wrong log."""


def marker_path(root: Path) -> Path:
    return Path(root) / MARKER


def request(root: Path, offset: int) -> None:
    """Step 1: make the decision durable. The store must be stopped; its next start applies it."""
    if offset < 0:
        raise ValueError(f"truncation offset {offset} is negative")
    write_bytes_atomic(marker_path(root), f"{offset}\n".encode("ascii"))


def pending(root: Path) -> int | None:
    """The target of a truncation that has not finished, or None."""
    path = marker_path(root)
    try:
        text = path.read_text("ascii").strip()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        text = ""
    if not text.isdigit():
        raise TruncationError(f"{path} holds {text[:40]!r}, not an offset",
                              hint="the marker is written only by pyrmq; restore it or remove the store's copy of "
                                   "the log and let the broker copy the group's log again")
    return int(text)


def is_record_start(commitlog: CommitLog, offset: int) -> bool:
    """Whether a record of the log's own chain starts at ``offset`` (or the log ends there), found by walking the
    records of the file that holds it from that file's start."""
    if offset == commitlog.max_offset:
        return True
    found = commitlog.view_at(offset)
    if found is None:
        return False
    mf, _ = found
    for at, res in commitlog.iter_records(mf.start_offset, commitlog.max_offset):
        if at == offset:
            return res.status is RecordStatus.VALID
        if at > offset:
            return False
    return False


def steps(
    target: int, commitlog: CommitLog, queues: ConsumeQueueStore, epochs: EpochFile, root: Path
) -> list[tuple[str, Callable[[], None]]]:
    """Step 2 as named actions, in order, each idempotent (the crash tests stop after each one)."""
    end = min(target, commitlog.max_offset)

    def check() -> None:
        if end < commitlog.min_offset:
            raise TruncationError(f"truncation to {target} is below the log's first offset {commitlog.min_offset}",
                                  hint="this replica shares no data with the master: move its store aside so it "
                                       "copies the group's log again")
        if not is_record_start(commitlog, end):
            raise TruncationError(f"truncation offset {target} is not where a record starts",
                                  hint="a bug: report it with the broker's log; the store is unchanged")

    def cut_commitlog() -> None:
        for mf in commitlog.files.truncate_to(end):
            log.info("truncation deleted %s (past %d)", mf.path, end)
        commitlog.files.set_flushed(end)

    def sync_commitlog() -> None:
        last = commitlog.files.last
        if last is not None:
            last.flush_sync(last.wrote_position)
        fsync_dir(commitlog.files.directory)

    def cut_queues() -> None:
        for cq in queues:
            before = cq.max_offset
            cq.truncate_dirty(end)
            if cq.max_offset != before:
                cq.flush_sync()

    def cut_epochs() -> None:
        epochs.cut_from(end)

    def done() -> None:
        os.unlink(marker_path(root))
        fsync_dir(Path(root))

    return [("check", check), ("cut commitlog", cut_commitlog), ("sync commitlog", sync_commitlog),
            ("cut consume queues", cut_queues), ("cut epoch history", cut_epochs), ("remove marker", done)]


def apply(target: int, commitlog: CommitLog, queues: ConsumeQueueStore, epochs: EpochFile, root: Path) -> int:
    """Step 2, on a loaded and recovered store; returns the new commitlog end."""
    for _, action in steps(target, commitlog, queues, epochs, root):
        action()
    end = commitlog.max_offset
    log.warning("store %s truncated to %d (now the group master's log up to there; the cut tail was never "
                "acknowledged to a producer)", root, end)
    return end
