"""Atomic JSON persistence for the broker's config files (topics.json, consumerOffset.json, ...).

RocketMQ's ConfigManager writes ``<file>.tmp``, copies the old file to ``<file>.bak`` and renames, but never
fsyncs, so a power loss can leave an empty file. Here the new content is fsynced before the rename, the old file
becomes ``<file>.bak`` by rename, and the directory is fsynced. A crash at any point leaves either the old or
the new file under one of the two names, and ``read_json`` falls back to ``.bak`` when the main file is missing,
empty or unparsable.

A whole-file rewrite per change made a storm of auto-created groups cost O(n^2) (1,000 new groups kept a broker
busy for 112 s), so tables that change at a peer's will go through ``BatchedJsonWriter``: one write per interval
at most, built and serialised in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.log import RateLimitedLog

log = logging.getLogger(__name__)


def fsync_dir(path: Path) -> None:
    """Make a rename, creation or removal in ``path`` durable (the directory entry, not the file's bytes)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, obj: Any, *, private: bool = False) -> None:
    write_bytes_atomic(path, json.dumps(obj, indent=2, sort_keys=True).encode("utf-8"), private=private)


def write_bytes_atomic(path: str | Path, data: bytes, *, private: bool = False) -> None:
    """Replace ``path`` with ``data`` as the module docstring describes (the old content kept as ``.bak``).

    ``private`` files (secrets: users' keys) are created readable by the owner alone, from the first byte on."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a leftover of a crash may carry another mode: the new file gets ours
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    with open(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json(path: str | Path, default: Any = None) -> Any:
    """Load ``path``, else its ``.bak``, else ``default``; a damaged main file is logged, never fatal."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        if not text.strip():
            log.warning("%s is empty; trying the backup", candidate)
            continue
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            log.warning("%s is not valid JSON (%s); trying the backup", candidate, exc)
    return default


Render = Callable[[], Any]  # runs in a worker thread: builds the JSON object from a snapshot taken on the loop

# After a write that cost c seconds of the writer thread's CPU, the next starts no sooner than c * (1 / MAX_WRITE_DUTY
# - 1) later: serialising a huge table can never take more than this share of a core (nor of the GIL the loop needs).
MAX_WRITE_DUTY = 0.1
FAILED_WRITE_RETRY_S = 1.0


class BatchedJsonWriter:
    """Writes one JSON file off the event loop in batches: every change made while a write waits or runs shares the
    next write (RocketMQ's ConfigManager rewrote the whole file per change).

    ``changed()`` (on the loop, O(1)) counts a change and schedules a write: at once when the file was last written
    ``min_interval_s`` or more ago, else when that time has passed (RocketMQ persists on such a schedule).
    ``flush()`` waits until every change counted before it is on disk, or raises the write's OSError; it does not
    wait for the interval, only for the write in progress (so an admin command that must be durable before its
    answer is), and concurrent callers share one write. Every write, however it was asked for, also waits out the
    CPU cap (``MAX_WRITE_DUTY``), so neither a storm of changes nor of flushes can keep a core busy with rewrites.
    ``close()`` writes what is pending now (graceful stop).

    ``snapshot`` runs on the loop and must be cheap (copy the table's dict; its values immutable or copied); it
    returns a ``Render`` that builds the JSON object in the worker thread, where ``write_json_atomic`` serialises
    and fsyncs too. A crash loses the changes nobody flushed since the last completed write: at most those of the
    last ``min_interval_s`` plus one write's time.
    """

    def __init__(self, path: str | Path, snapshot: Callable[[], Render], *, min_interval_s: float = 0.0,
                 max_duty: float = MAX_WRITE_DUTY) -> None:
        self.path = Path(path)
        self.snapshot = snapshot
        self.min_interval_s = max(0.0, min_interval_s)
        self.max_duty = max_duty
        self.writes = 0  # completed writes (a metric: "the file was written at most K times")
        self.failures = 0
        self.changes = 0  # changes counted so far
        self.saved = 0  # changes on disk
        self._interval_at = 0.0  # loop time before which no scheduled (unflushed) write starts
        self._duty_at = 0.0  # loop time before which no write starts at all
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0  # when _timer fires (loop time)
        self._writing: asyncio.Task | None = None
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._closed = False
        self._errors = RateLimitedLog(log, 60.0)

    @property
    def dirty(self) -> bool:
        return self.saved < self.changes

    def changed(self) -> None:
        self.changes += 1
        self._schedule()

    def written_externally(self) -> None:
        """Everything counted so far is on disk (a blocking write at load or in a test)."""
        self.saved = self.changes

    async def flush(self) -> None:
        """Return once every change counted before this call is on disk; raises OSError when the write failed."""
        target = self.changes
        if self.saved >= target:
            return
        if self._closed:
            await self._write()  # after close() nothing is scheduled any more: write directly
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        self._schedule()
        await waiter

    async def close(self) -> None:
        """Stop scheduling; write what is pending now (raises the write's error)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is not None:
            await asyncio.wait([self._writing])
        if self.dirty:
            await self._write()

    # internals ------------------------------------------------------------------------------------------------
    def _schedule(self) -> None:
        if self._closed or self._writing is not None or not self.dirty:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a unit test, load time): the owner writes with a blocking call
        when = self._duty_at if self._waiters else max(self._interval_at, self._duty_at)
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()  # a flush may start sooner than the interval wanted
            self._timer = None
        if when <= loop.time():
            self._start()
        else:
            # the time is kept here: uvloop answers a call_at less than a millisecond ahead with a plain Handle,
            # which has no when()
            self._timer = loop.call_at(when, self._start)
            self._timer_at = when

    def _start(self) -> None:
        self._timer = None
        if self._writing is None and self.dirty:
            self._writing = asyncio.ensure_future(self._write())
            self._writing.add_done_callback(self._written)

    def _written(self, task: asyncio.Task) -> None:
        self._writing = None
        if not task.cancelled():
            task.exception()  # reported to the waiters and logged in _write
        self._schedule()

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        target = self.changes
        started = loop.time()
        try:
            render = self.snapshot()
            cpu_s = await asyncio.to_thread(_render_and_write, self.path, render)
        except Exception as exc:
            self.failures += 1
            retry_s = max(self.min_interval_s, FAILED_WRITE_RETRY_S)
            self._errors.warning("writing %s failed: %s; retrying in %.1f s", self.path, exc, retry_s)
            self._interval_at = self._duty_at = loop.time() + retry_s
            self._settle(target, exc)
            raise
        ended = loop.time()
        self._interval_at = started + self.min_interval_s
        self._duty_at = ended + cpu_s * (1 / self.max_duty - 1)
        self.writes += 1
        self.saved = max(self.saved, target)
        self._settle(target, None)

    def _settle(self, target: int, exc: BaseException | None) -> None:
        keep = []
        for want, waiter in self._waiters:
            if want > target:
                keep.append((want, waiter))
            elif not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc if isinstance(exc, OSError) else OSError(str(exc)))
        self._waiters = keep


def _render_and_write(path: Path, render: Render) -> float:
    """Build, serialise and write; returns the CPU seconds this thread spent (the write's cost to the process)."""
    begin = time.thread_time()
    write_json_atomic(path, render())
    return time.thread_time() - begin
