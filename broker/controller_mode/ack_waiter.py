"""The controller-mode master's replica waiter: PUT_OK once every SyncStateSet member acked (``allAckInSyncStateSet``)
and the master's fence allows SEND_OK at that moment (``fence.SendFence``: a valid role lease, or a fully acked set
of at least two under clean election).

It replaces the classic SYNC_MASTER waiter (``GroupTransfer``: any one slave). ``acks()`` gives the members' acks
(brokerId -> offset, from the HA master's live connections); ``on_ack`` is called on every ack and releases the
waiters the confirm offset now covers. A waiter that is not covered within ``slaveTimeout`` (or the sender's
deadline) answers FLUSH_SLAVE_TIMEOUT, naming the members that had not acked. With ``allAckInSyncStateSet=false`` one
member's ack suffices (RocketMQ's inSyncReplicas=1 path with a slave).

Cost per put, which decides controller mode's throughput against classic SYNC_MASTER (``bench/
controller_throughput_bench.py``): the members' acks are read once per ack or SyncStateSet change (``on_ack``, which
the owner calls on both; a proposed set counts from the moment it is proposed), not on every put, so ``covered()``
(called by each put and by the confirm gate on each dispatch) is one comparison; waiters with the same timeout share
one timer (deadlines in insertion order), as ``GroupTransfer``'s do. A member whose connection closed keeps its
last ack here: it held those bytes, and every later put ends beyond them, so nothing is released early.
Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Mapping

from broker.controller_mode.fence import SendFence
from broker.controller_mode.sync_state_set import SyncStateSetView
from broker.store.types import PutStatus

MAX_WAITERS = 100_000


class SyncStateSetWaiter:
    def __init__(self, *, view: Callable[[], SyncStateSetView], acks: Callable[[], Mapping[int, int]],
                 master_max: Callable[[], int], fence: SendFence, slave_timeout_ms: int, all_ack: bool) -> None:
        self._view = view
        self._acks = acks
        self._master_max = master_max
        self.fence = fence
        self.timeout_s = slave_timeout_ms / 1000.0
        self.all_ack = all_ack
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._deadlines: deque[tuple[float, int, asyncio.Future]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._seq = itertools.count()
        self._acked: int | None = None  # what the counted members acked (None: the set is the master alone)
        self.fenced = 0  # sends refused by the fence
        self.released_upto = 0  # the highest offset released as acked by the set (a joining member must hold it)
        self._read_acks()

    def _read_acks(self) -> None:
        counted, acks = self._view().counted, self._acks()
        if not counted:
            self._acked = None
        elif self.all_ack:
            self._acked = min(acks.get(i, -1) for i in counted)
        else:
            self._acked = max(acks.get(i, -1) for i in counted)

    def covered(self) -> int:
        """The offset every counted member acked (RocketMQ's confirm offset); the master's max offset when the set
        is the master alone. An ack never exceeds the master's max offset (the HA master closes a link that acks
        beyond it), so the common case is one attribute read."""
        acked = self._acked
        return self._master_max() if acked is None else acked

    def _answer(self, next_offset: int) -> tuple[PutStatus, str]:
        size = self._view().size
        if self.fence.allows(size, self.all_ack):
            return PutStatus.PUT_OK, ""
        self.fenced += 1
        return PutStatus.SLAVE_NOT_AVAILABLE, self.fence.remark(size, self.all_ack)

    async def wait(self, next_offset: int, deadline: float | None = None) -> tuple[PutStatus, str]:
        loop = asyncio.get_running_loop()
        expire = loop.time() + self.timeout_s  # no SEND_OK after this, whatever runs first once the loop stalled
        if next_offset <= self.covered():
            self.released_upto = max(self.released_upto, next_offset)
            return await self._held_answer(next_offset, deadline, expire)
        size = self._view().size
        if not self.fence.lease.valid() and not self.fence.by_set(size, self.all_ack):
            self.fenced += 1  # nothing the replicas do can make this a SEND_OK now: say so at once
            return PutStatus.SLAVE_NOT_AVAILABLE, self.fence.remark(size, self.all_ack)
        if len(self._heap) >= MAX_WAITERS:
            return PutStatus.FLUSH_SLAVE_TIMEOUT, f"{MAX_WAITERS} puts already wait for the SyncStateSet"
        fut: asyncio.Future = loop.create_future()
        heapq.heappush(self._heap, (next_offset, next(self._seq), fut))
        if deadline is not None and deadline < expire:
            timer = loop.call_at(deadline, self._expire, fut, next_offset)  # a sender in a hurry: its own timer
            fut.add_done_callback(lambda _f: timer.cancel())
        else:
            self._deadlines.append((expire, next_offset, fut))
            if self._timer is None:
                self._timer = loop.call_at(expire, self._expire_due)
        await fut
        if fut.result()[0] is not PutStatus.PUT_OK:
            return fut.result()
        return await self._held_answer(next_offset, deadline, expire)

    async def _held_answer(self, next_offset: int, deadline: float | None, expire: float) -> tuple[PutStatus, str]:
        """The answer, after the fence's hold of a new master (fence.py: the old master's waiters expire first), and
        never SEND_OK once ``slaveTimeout`` passed: a loop that stalled (SIGSTOP, a blocking call) runs the reads of
        acks its kernel buffered before the timer that expires the waiter, and a new master's hold counts on that
        timer (fence.py)."""
        loop = asyncio.get_running_loop()
        hold = self.fence.hold_s()
        if hold > 0:
            if deadline is not None and loop.time() + hold > deadline:
                return (PutStatus.FLUSH_SLAVE_TIMEOUT, f"this broker became master moments ago and answers SEND_OK "
                        f"only {hold:.1f} s from now (the old master's waiters must expire first); stored here, "
                        "do not resend")
            await asyncio.sleep(hold)
        if loop.time() >= expire:
            return (PutStatus.FLUSH_SLAVE_TIMEOUT, f"the SyncStateSet's acks were read only after slaveTimeout "
                    f"({int(self.timeout_s * 1000)} ms) had passed (the broker stalled); stored on the master, do "
                    "not resend")
        return self._answer(next_offset)

    def _expire_due(self) -> None:
        """The shared timer: time out every waiter whose slaveTimeout passed, re-arm for the oldest left."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now, due = loop.time(), self._deadlines
        while due and (due[0][2].done() or due[0][0] <= now):
            _, next_offset, fut = due.popleft()
            self._expire(fut, next_offset)
        if due:
            self._timer = loop.call_at(due[0][0], self._expire_due)

    def _expire(self, fut: asyncio.Future, next_offset: int) -> None:
        if fut.done():
            return
        view, acks = self._view(), self._acks()
        missing = sorted(i for i in view.counted if acks.get(i, -1) < next_offset)
        fenced = "" if self.fence.lease.valid() else f"; fenced: {self.fence.deposed or self.fence.lease.reason()}"
        fut.set_result((PutStatus.FLUSH_SLAVE_TIMEOUT,
                        f"SyncStateSet members {missing} did not acknowledge offset {next_offset} within "
                        f"{int(self.timeout_s * 1000)} ms (or the sender's deadline); stored on the master, do not "
                        f"resend{fenced}"))
        if len(self._heap) > 1024 and sum(1 for e in self._heap if e[2].done()) * 2 > len(self._heap):
            self._heap = [e for e in self._heap if not e[2].done()]
            heapq.heapify(self._heap)

    def on_ack(self) -> None:
        """An ack arrived or the SyncStateSet (or its proposal) changed: read the acks, release what they cover."""
        self._read_acks()
        if not self._heap:
            return
        covered = self.covered()
        heap = self._heap
        if heap[0][0] <= covered:
            self.released_upto = max(self.released_upto, covered)
        while heap and heap[0][0] <= covered:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result((PutStatus.PUT_OK, ""))

    def close(self) -> None:
        for _, _, fut in self._heap:
            if not fut.done():
                fut.set_result((PutStatus.FLUSH_SLAVE_TIMEOUT, "the master is switching role before the "
                                "SyncStateSet acked; stored on it only"))
        self._heap.clear()
        self._deadlines.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
