"""The confirm-offset gate (controller mode only): consumers see a message only once every SyncStateSet member holds
it (RocketMQ 5's confirmOffset with ``readUnCommitted=false``, spec rocketmq-replication.md §9.4).

RocketMQ delays the consume-queue dispatch itself. Here the master keeps writing its units on the put path (classic
mode's hot path stays exactly as it was) and the consumer reads stop at the confirm offset instead: ``limit`` is read
once per pull batch (``get.get_message``'s ``visible_below``), and the dispatch notifications consumers wait on
(long polling, v2 receive) are held back until the confirm offset covers the records that caused them, then
released in order. ``confirm`` is the master's replica waiter's confirm offset; ``refresh`` runs on every ack, every
SyncStateSet change and every put (a set of the master alone confirms its max offset at once). On a slave
``confirm`` is the master's confirm offset as the controller last reported it (``replicas_manager``). The limit never goes
back: a member without a connection holds it where it is (RocketMQ refuses to advance then).

Bounded: per queue at most ``MAX_PENDING`` held notifications; past that the newest one replaces the last kept (a
waiter then wakes a little later, at the latest on the hold service's 5 s re-check). Task-safety: event loop only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from broker.store.consume_queue import UNIT, UNIT_SIZE

MAX_PENDING = 64

Key = tuple[str, int]
Listener = Callable[[str, int, int], None]


class ConfirmGate:
    def __init__(self, initial: int, max_phy: Callable[[], int]) -> None:
        self.limit = initial  # records starting at or beyond this commitlog offset are not visible yet
        self.confirm: Callable[[], int] | None = None
        self.listeners: list[Listener] = []
        self._max_phy = max_phy
        self._pending: dict[Key, deque[tuple[int, int]]] = {}  # queue -> (max queue offset, commitlog end) held

    def refresh(self) -> int:
        """Take the confirm offset now and release what it covers; returns the limit."""
        if self.confirm is not None:
            new = self.confirm()
            if new > self.limit:
                self.limit = new
                if self._pending:
                    self._release(new)
        return self.limit

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener: pass the notification on once the confirm offset covers it."""
        end = self._max_phy()
        if end > self.limit and self.refresh() < end:
            held = self._pending.get((topic, queue_id))
            if held is None:
                self._pending[(topic, queue_id)] = deque([(max_offset, end)])
            elif len(held) < MAX_PENDING:
                held.append((max_offset, end))
            else:
                held[-1] = (max_offset, end)
            return
        self._fire(topic, queue_id, max_offset)

    def _release(self, limit: int) -> None:
        for key in list(self._pending):
            held = self._pending[key]
            released = -1
            while held and held[0][1] <= limit:
                released = held.popleft()[0]
            if not held:
                del self._pending[key]
            if released >= 0:
                self._fire(key[0], key[1], released)

    def _fire(self, topic: str, queue_id: int, max_offset: int) -> None:
        for cb in self.listeners:
            cb(topic, queue_id, max_offset)


def visible_units(units, limit: int) -> int:
    """How many of ``units`` (consume-queue units in queue order, so in commitlog order) start below ``limit``: one
    comparison when all do, a bisection otherwise."""
    n = len(units) // UNIT_SIZE
    if not n or UNIT.unpack_from(units, (n - 1) * UNIT_SIZE)[0] < limit:
        return n
    lo, hi = 0, n - 1  # the answer is in [lo, hi]: unit hi is not visible
    while lo < hi:
        mid = (lo + hi) // 2
        if UNIT.unpack_from(units, mid * UNIT_SIZE)[0] < limit:
            lo = mid + 1
        else:
            hi = mid
    return lo


def visible_max_offset(cq, limit: int) -> int:
    """The queue's max offset as consumers see it: the units from the first one at or beyond ``limit`` on are hidden."""
    lo, hi = cq.min_offset, cq.max_offset
    if hi <= lo:
        return hi
    last = cq.unit(hi - 1)
    if last is None or last[0] < limit:
        return hi
    hi -= 1  # unit hi is hidden; find the first hidden one in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        unit = cq.unit(mid)
        if unit is not None and unit[0] < limit:
            lo = mid + 1
        else:
            hi = mid
    return lo
