"""The controller-mode master's replica waiter: PUT_OK once every SyncStateSet member acked (``allAckInSyncStateSet``)
and the master's fence allows SEND_OK at that moment (``fence.SendFence``: a valid role lease, or a fully acked set
of at least two under clean election).

It replaces the classic SYNC_MASTER waiter (``GroupTransfer``: any one slave). ``acks()`` gives the members' acks
(brokerId -> offset, from the HA master's live connections); ``on_ack`` is called on every ack and releases the
waiters the confirm offset now covers. A waiter that is not covered within ``slaveTimeout`` (or the sender's
deadline) answers FLUSH_SLAVE_TIMEOUT, naming the members that had not acked. With ``allAckInSyncStateSet=false`` one
member's ack suffices (RocketMQ's inSyncReplicas=1 path with a slave). Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
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
        self._seq = itertools.count()
        self.fenced = 0  # sends refused by the fence
        self.released_upto = 0  # the highest offset released as acked by the set (a joining member must hold it)

    def covered(self) -> int:
        """The offset every counted member acked (RocketMQ's confirm offset)."""
        view, acks = self._view(), self._acks()
        if self.all_ack or not view.counted:
            return view.confirm_offset(acks, self._master_max())
        return min(max(acks.get(i, -1) for i in view.counted), self._master_max())

    def _answer(self, next_offset: int) -> tuple[PutStatus, str]:
        size = self._view().size
        if self.fence.allows(size, self.all_ack):
            return PutStatus.PUT_OK, ""
        self.fenced += 1
        return PutStatus.SLAVE_NOT_AVAILABLE, self.fence.remark(size, self.all_ack)

    async def wait(self, next_offset: int, deadline: float | None = None) -> tuple[PutStatus, str]:
        if next_offset <= self.covered():
            self.released_upto = max(self.released_upto, next_offset)
            return await self._held_answer(next_offset, deadline)
        size = self._view().size
        if not self.fence.lease.valid() and not self.fence.by_set(size, self.all_ack):
            self.fenced += 1  # nothing the replicas do can make this a SEND_OK now: say so at once
            return PutStatus.SLAVE_NOT_AVAILABLE, self.fence.remark(size, self.all_ack)
        if len(self._heap) >= MAX_WAITERS:
            return PutStatus.FLUSH_SLAVE_TIMEOUT, f"{MAX_WAITERS} puts already wait for the SyncStateSet"
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        heapq.heappush(self._heap, (next_offset, next(self._seq), fut))
        expire = loop.time() + self.timeout_s
        if deadline is not None:
            expire = min(expire, deadline)
        timer = loop.call_at(expire, self._expire, fut, next_offset)
        try:
            await fut
        finally:
            timer.cancel()
        if fut.result()[0] is not PutStatus.PUT_OK:
            return fut.result()
        return await self._held_answer(next_offset, deadline)

    async def _held_answer(self, next_offset: int, deadline: float | None) -> tuple[PutStatus, str]:
        """The answer, after the fence's hold of a new master (fence.py: the old master's waiters expire first)."""
        hold = self.fence.hold_s()
        if hold > 0:
            loop = asyncio.get_running_loop()
            if deadline is not None and loop.time() + hold > deadline:
                return (PutStatus.FLUSH_SLAVE_TIMEOUT, f"this broker became master moments ago and answers SEND_OK "
                        f"only {hold:.1f} s from now (the old master's waiters must expire first); stored here, "
                        "do not resend")
            await asyncio.sleep(hold)
        return self._answer(next_offset)

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
