"""Queue locks of orderly consumers (RocketMQ RebalanceLockManager): LOCK_BATCH_MQ / UNLOCK_BATCH_MQ.

An orderly push consumer locks each queue it was assigned on the master before it consumes it, renews the lock
every 20 s and unlocks on rebalance or shutdown. A lock belongs to one client id per (group, queue); it expires
``LOCK_MAX_LIVE_S`` (60 s, RocketMQ's ``rocketmq.broker.rebalance.lockMaxLiveTime``) after its last renewal, so
a consumer that died without unlocking releases its queues within a minute.

Pure and single-threaded (the broker's event loop); the clock is injected. Bounded: a group keeps at most
``MAX_LOCKS_PER_GROUP`` locks, expired ones are dropped on every lock request of the group.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

LOCK_MAX_LIVE_S = 60.0
MAX_LOCKS_PER_GROUP = 65536


class MessageQueue(NamedTuple):
    """RocketMQ's MessageQueue, the unit of locking: ``{"brokerName","queueId","topic"}`` on the wire."""

    topic: str
    broker_name: str
    queue_id: int


class _Lock:
    __slots__ = ("client_id", "renewed_at")

    def __init__(self, client_id: str, renewed_at: float) -> None:
        self.client_id = client_id
        self.renewed_at = renewed_at


class RebalanceLockManager:
    def __init__(self, *, max_live_s: float = LOCK_MAX_LIVE_S, clock=time.monotonic) -> None:
        self.max_live_s = max_live_s
        self._clock = clock
        self._groups: dict[str, dict[MessageQueue, _Lock]] = {}

    def try_lock(self, group: str, client_id: str, mqs: Iterable[MessageQueue]) -> list[MessageQueue]:
        """Lock (or renew) every queue that is free, expired or already this client's; return those."""
        now = self._clock()
        locks = self._groups.setdefault(group, {})
        self._expire(locks, now)
        out: list[MessageQueue] = []
        for mq in mqs:
            lock = locks.get(mq)
            if lock is None:
                if len(locks) >= MAX_LOCKS_PER_GROUP:
                    continue
                locks[mq] = _Lock(client_id, now)
            elif lock.client_id == client_id:
                lock.renewed_at = now
            else:
                continue
            out.append(mq)
        if not locks:
            del self._groups[group]
        return out

    def unlock(self, group: str, client_id: str, mqs: Iterable[MessageQueue]) -> int:
        """Release the queues this client holds; another client's locks stay. Returns how many were released."""
        locks = self._groups.get(group)
        if not locks:
            return 0
        released = 0
        for mq in mqs:
            lock = locks.get(mq)
            if lock is not None and lock.client_id == client_id:
                del locks[mq]
                released += 1
        if not locks:
            del self._groups[group]
        return released

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client id holding a live lock on ``mq``, if any."""
        lock = self._groups.get(group, {}).get(mq)
        if lock is None or self._clock() - lock.renewed_at > self.max_live_s:
            return None
        return lock.client_id

    def _expire(self, locks: dict[MessageQueue, _Lock], now: float) -> None:
        dead = [mq for mq, lock in locks.items() if now - lock.renewed_at > self.max_live_s]
        for mq in dead:
            del locks[mq]
