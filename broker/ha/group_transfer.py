"""SYNC_MASTER waits: one shared wait for many senders (RocketMQ GroupTransferService in asyncio).

A SYNC_MASTER answers PUT_OK only once some slave acked the batch's end offset (DESIGN §4). The store calls
``wait(next_offset)`` right after its append. The decision:
- ``is_slave_ok(next_offset)``: at least one slave connected and ``next_offset - push2SlaveMaxOffset <
  haSlaveFallbehindMax``; otherwise SLAVE_NOT_AVAILABLE at once;
- otherwise a future goes into a heap ordered by next_offset; every ack pops the whole prefix it covers
  (PUT_OK), so N concurrent senders cost one heap push each and a handful of acks in total: no per-request
  frame, no per-request polling;
- deadlines are ``now + slaveTimeout`` in insertion order, so one timer (``call_at`` for the oldest pending
  deadline) expires them in order (FLUSH_SLAVE_TIMEOUT);
- a put whose sender waits less than that (the send request's ``timeoutMillis``, spec §3 conventions) passes
  the ``deadline`` by which it must be answered; such a wait gets a timer of its own and answers
  FLUSH_SLAVE_TIMEOUT then, so the sender learns the status instead of timing out.

``push2SlaveMaxOffset`` is one monotonic value per master: the highest ack any slave ever sent (never reset on
disconnect, as in RocketMQ). Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import deque
from collections.abc import Callable

from broker.store.types import PutStatus

log = logging.getLogger(__name__)

# Bound on waiting puts; beyond it a put is answered FLUSH_SLAVE_TIMEOUT at once instead of queueing forever.
MAX_WAITERS = 1_000_000


class GroupTransfer:
    def __init__(self, *, broker_name: str, ha_port: int, slave_timeout_ms: int, fallbehind_max: int,
                 connected_slaves: Callable[[], int]) -> None:
        self.broker_name = broker_name
        self.ha_port = ha_port
        self.slave_timeout_s = slave_timeout_ms / 1000.0
        self.fallbehind_max = fallbehind_max
        self._connected_slaves = connected_slaves
        self.push2slave_max_offset = 0
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._deadlines: deque[tuple[float, int, asyncio.Future]] = deque()
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._stale = 0  # timed-out entries still in the heap (popped by a later ack or a compaction)
        # counters for metrics
        self.ok = 0
        self.timeouts = 0
        self.not_available = 0

    # decisions -------------------------------------------------------------------------------------------
    def is_slave_ok(self, next_offset: int) -> bool:
        return self._connected_slaves() > 0 and next_offset - self.push2slave_max_offset < self.fallbehind_max

    def _not_available_remark(self, next_offset: int) -> str:
        if self._connected_slaves() <= 0:
            return (f"no slave connected to {self.broker_name}'s HA port {self.ha_port}; the message is stored on "
                    "the master only")
        behind = next_offset - self.push2slave_max_offset
        return (f"the slave of {self.broker_name} is {behind} bytes behind (haSlaveFallbehindMax="
                f"{self.fallbehind_max}); the message is stored on the master only until the slave catches up")

    # waiter ----------------------------------------------------------------------------------------------
    async def wait(self, next_offset: int, deadline: float | None = None) -> tuple[PutStatus, str]:
        """The store's replica waiter: PUT_OK once a slave acked ``next_offset``, FLUSH_SLAVE_TIMEOUT after
        slaveTimeout or at ``deadline`` (event-loop time), whichever comes first."""
        if next_offset <= self.push2slave_max_offset:
            self.ok += 1
            return PutStatus.PUT_OK, ""
        if not self.is_slave_ok(next_offset):
            self.not_available += 1
            return PutStatus.SLAVE_NOT_AVAILABLE, self._not_available_remark(next_offset)
        if len(self._heap) - self._stale >= MAX_WAITERS:
            self.timeouts += 1
            return PutStatus.FLUSH_SLAVE_TIMEOUT, f"{MAX_WAITERS} puts already wait for the slave; stored on master"
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        seq = next(self._seq)
        heapq.heappush(self._heap, (next_offset, seq, fut))
        expire_at = loop.time() + self.slave_timeout_s
        if deadline is not None and deadline < expire_at:
            timer = loop.call_at(deadline, self._expire_early, fut, next_offset)
            fut.add_done_callback(lambda _f: timer.cancel())
            return await fut
        self._deadlines.append((expire_at, next_offset, fut))
        if self._timer is None:
            self._arm(loop, expire_at)
        return await fut

    def _expire_early(self, fut: asyncio.Future, next_offset: int) -> None:
        """The sender's deadline came before slaveTimeout (its entry stays in the heap until an ack pops it)."""
        if fut.done():
            return
        self._time_out(fut, next_offset, senders_deadline=True)
        self._compact()

    def on_ack(self, offset: int) -> None:
        """A slave acked ``offset``: raise push2SlaveMaxOffset and release every waiter it covers."""
        if offset <= self.push2slave_max_offset:
            return
        self.push2slave_max_offset = offset
        heap = self._heap
        while heap and heap[0][0] <= offset:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result((PutStatus.PUT_OK, ""))
                self.ok += 1
            else:
                self._stale -= 1

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._timer_at = when
        self._timer = loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        dq = self._deadlines
        while dq and (dq[0][2].done() or dq[0][0] <= now):
            deadline, next_offset, fut = dq.popleft()
            if not fut.done():
                self._time_out(fut, next_offset, senders_deadline=False)
        self._compact()
        if dq:
            self._arm(loop, dq[0][0])

    def _time_out(self, fut: asyncio.Future, next_offset: int, *, senders_deadline: bool) -> None:
        """Answer one waiter FLUSH_SLAVE_TIMEOUT, naming the limit that passed (the sender's deadline or
        slaveTimeout); its heap entry turns stale until an ack pops it or ``_compact`` drops it."""
        self.timeouts += 1
        self._stale += 1
        ms, ack = int(self.slave_timeout_s * 1000), self.push2slave_max_offset
        when = (f"before the sender's deadline (slaveTimeout={ms} ms, highest slave ack {ack})" if senders_deadline
                else f"within slaveTimeout={ms} ms (highest slave ack {ack})")
        fut.set_result((PutStatus.FLUSH_SLAVE_TIMEOUT, (
            f"no slave of {self.broker_name} acknowledged offset {next_offset} {when}; the message is stored on the "
            "master and replicates when the slave catches up")))

    def _compact(self) -> None:
        if self._stale > 1024 and self._stale * 2 > len(self._heap):
            # a silent slave: drop timed-out entries in one O(n) pass instead of letting the heap grow
            self._heap = [e for e in self._heap if not e[2].done()]
            heapq.heapify(self._heap)
            self._stale = 0

    @property
    def pending(self) -> int:
        return sum(1 for _, _, f in self._heap if not f.done())

    def close(self) -> None:
        """Answer every waiter now (stop): the messages are on the master only."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for _, _, fut in self._heap:
            if not fut.done():
                fut.set_result((PutStatus.FLUSH_SLAVE_TIMEOUT,
                                f"{self.broker_name} is stopping before a slave acked; stored on the master only"))
        self._heap.clear()
        self._deadlines.clear()
        self._stale = 0
