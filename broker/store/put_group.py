"""Concurrent single-message puts share one append per queue and one flush/replica wait (issue 26 goal 2).

RocketMQ's clients (Java, Go, Rust, C++) send one message per SEND_MESSAGE(_V2) request unless the application
batches. On a SYNC_MASTER each such put paid a whole put of its own: a record, two pwrites (commitlog and consume
queue), the dispatch and append listeners (the HA writer's wakeup), a waiter in the replica heap, a chain of
coroutines per request. Here the puts of one event-loop pass are gathered (``submit``) and flushed once, after every
read of that pass was served (``call_soon``): one append per (topic, queue) with the messages in arrival order, then
ONE ``wait_stored`` for the highest end offset, and each put gets its own ``PutResult`` (its physical offset, its
queue offset, the group's status). Members are told by a plain callback, called as soon as the result is known:
a future's callbacks would each cost one more turn of the loop between the slave's ack and the answer.

A put's own ``deadline`` (the sender's ``timeoutMillis``) is kept: the group waits until the latest deadline of
its members (or slaveTimeout when one has none), and a member whose deadline comes earlier is answered
FLUSH_SLAVE_TIMEOUT at its deadline by a timer of its own, as ``GroupTransfer`` answers a lone put.

Groups append one after the other (``_appending``, a FIFO lock held for the appends only, not the waits): a group
whose append yields (the store's put lock, a file roll) never lets the next pass's group write to a queue before it,
so a queue holds its puts in the order they were submitted (the pop revive log relies on it).

The group only appends what ``append`` accepts (the store re-checks that it still takes writes under its put lock)
and only waits for members that asked to (WAIT=true). Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker.store.put_prepare import E_QUEUE, E_SIZE, E_TOPIC, Prepared
from broker.store.types import PutResult, PutStatus

log = logging.getLogger(__name__)

Append = Callable[[Prepared], Awaitable[PutResult]]
WaitStored = Callable[[PutResult, "float | None"], Awaitable[None]]

# Puts gathered in one pass before the group flushes without waiting for the pass to end (bounds one append).
MAX_GROUP = 4096


OnDone = Callable[[PutResult], None]


class _Member:
    __slots__ = ("answered", "deadline", "on_done", "prepared", "result", "timer")

    def __init__(self, prepared: Prepared, deadline: float | None, on_done: OnDone) -> None:
        self.prepared = prepared
        self.deadline = deadline
        self.on_done = on_done
        self.answered = False
        self.result: PutResult | None = None
        self.timer: asyncio.TimerHandle | None = None

    def answer(self, result: PutResult) -> None:
        if self.answered:
            return
        self.answered = True
        try:
            self.on_done(result)
        except Exception:  # one member's callback must not cost the others their answers
            log.exception("a grouped put's callback failed")


class PutGroup:
    """Gathers single-queue puts of one loop pass; ``append(prepared)`` writes one merged batch (no wait),
    ``wait_stored(result, deadline)`` waits for the flush and the replica of ``result.next_offset``."""

    def __init__(self, append: Append, wait_stored: WaitStored, *, replicated: Callable[[], bool]) -> None:
        self._append = append
        self._wait_stored = wait_stored
        self._replicated = replicated  # a replica wait is part of wait_stored (else only the flush is)
        self._pending: list[_Member] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task] = set()
        self._appending = asyncio.Lock()  # FIFO: the groups' appends in the order the groups were flushed
        self.groups = 0  # flushes, for the bench and tests
        self.puts = 0
        self.appends = 0  # store appends (one per queue of a group)

    def submit(self, prepared: Prepared, deadline: float | None, on_done: OnDone) -> None:
        """``on_done(result)`` once the put's group was appended and (WAIT) flushed and replicated."""
        self._pending.append(_Member(prepared, deadline, on_done))
        if len(self._pending) >= MAX_GROUP:
            self._flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        members, self._pending = self._pending, []
        if not members:
            return
        task = asyncio.get_running_loop().create_task(self._run(members))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, members: list[_Member]) -> None:
        try:
            await self._store(members)
        except BaseException as exc:  # an answer for everyone, whatever happened
            failed = PutResult(PutStatus.UNKNOWN_ERROR, remark=f"the grouped put failed: {type(exc).__name__}: {exc}")
            for m in members:
                m.answer(failed)
            if not isinstance(exc, Exception):
                raise
            log.exception("a grouped put failed")

    async def _store(self, members: list[_Member]) -> None:
        self.groups += 1
        self.puts += len(members)
        by_queue: dict[tuple[str, int], list[_Member]] = {}
        for m in members:
            first = m.prepared.entries[0]
            by_queue.setdefault((first[E_TOPIC], first[E_QUEUE]), []).append(m)
        async with self._appending:
            waiting, end = await self._append_all(by_queue)
        if not waiting:
            return
        deadlines = [m.deadline for m in waiting]
        deadline = None if None in deadlines else max(deadlines)
        loop = asyncio.get_running_loop()
        for m in waiting:
            if m.deadline is not None and (deadline is None or m.deadline < deadline):
                m.timer = loop.call_at(m.deadline, _expire, m, self._replicated())
        cover = PutResult(PutStatus.PUT_OK, wrote_offset=end, wrote_bytes=0)
        await self._wait_stored(cover, deadline)
        for m in waiting:
            if m.timer is not None:
                m.timer.cancel()
            if m.answered:
                continue
            r = m.result
            if cover.status is not PutStatus.PUT_OK:
                r.status, r.remark = cover.status, cover.remark
            m.answer(r)

    async def _append_all(self, by_queue: dict[tuple[str, int], list[_Member]]) -> tuple[list[_Member], int]:
        """One append per queue; members that need no wait (or whose append failed) are answered here: (the members
        that wait, the end offset of what was appended)."""
        waiting: list[_Member] = []
        end = -1
        for group in by_queue.values():
            if len(group) == 1:
                merged = group[0].prepared
            else:
                entries = []
                for m in group:
                    entries += m.prepared.entries
                merged = Prepared(entries, sum(m.prepared.total for m in group), True, True, True)
            self.appends += 1
            result = await self._append(merged)
            if result.status is not PutStatus.PUT_OK:
                for m in group:
                    m.answer(PutResult(result.status, remark=result.remark))
                continue
            phys = result.physical_offsets
            qoff, ts = result.queue_offset, result.store_timestamp
            i = 0
            for m in group:
                n = len(m.prepared.entries)
                mine = phys[i : i + n]
                last = m.prepared.entries[-1]
                m.result = PutResult(PutStatus.PUT_OK, wrote_offset=mine[0], wrote_bytes=mine[-1] + last[E_SIZE] - mine[0],
                                     queue_offset=qoff + i, msg_count=n, store_timestamp=ts, physical_offsets=mine)
                i += n
                if m.prepared.wait:
                    waiting.append(m)
                else:
                    m.answer(m.result)
            end = max(end, result.next_offset)
        return waiting, end

    def flush_now(self) -> None:
        """Hand what was submitted to a group now (the store is stopping: its appends are then refused, and each
        member learns it instead of waiting for a flush that never comes)."""
        self._flush()


def _expire(m: _Member, replicated: bool) -> None:
    """A member's own deadline came before its group's: it learns the timeout now (the message is stored)."""
    if m.answered or m.result is None:
        return
    r = m.result
    if replicated:
        r.status = PutStatus.FLUSH_SLAVE_TIMEOUT
        r.remark = ("the slave did not acknowledge this message before the sender's deadline; it is stored on the "
                    "master and replicates when the slave catches up")
    else:
        r.status = PutStatus.FLUSH_DISK_TIMEOUT
        r.remark = "the flush did not complete before the sender's deadline; the message is in the page cache"
    m.answer(r)
