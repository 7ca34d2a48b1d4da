"""Per-queue consumer state (RocketMQ's ProcessQueue) and the queue allocation rule, both pure.

A ProcessQueue tracks the next offset to pull and the messages pulled but not yet consumed. Offsets are
inserted in increasing order, so the lowest unconsumed offset is the first key of ``inflight``; the committable
offset is that (or ``next_offset`` when nothing is in flight): the consumer never commits past a message that
is still being consumed or waiting for a local retry.
"""

from __future__ import annotations

import asyncio

from client.message import MessageQueue
from client.selector import MessageSelector


class ProcessQueue:
    __slots__ = ("dropped", "idle", "inflight", "mq", "next_offset", "running", "subscription", "task")

    def __init__(self, mq: MessageQueue, subscription: MessageSelector | str) -> None:
        self.mq = mq
        self.subscription = subscription
        self.next_offset = -1  # -1: not yet known (the pull loop computes it)
        self.inflight: dict[int, None] = {}  # queue offsets pulled and not yet consumed, ascending
        self.running = 0  # messages being consumed by the listener right now
        self.dropped = False
        self.task: asyncio.Task | None = None
        self.idle = asyncio.Event()  # set while running == 0
        self.idle.set()

    def add(self, offsets: list[int]) -> None:
        inflight = self.inflight
        for off in offsets:
            inflight[off] = None

    def done(self, offsets: list[int]) -> None:
        inflight = self.inflight
        for off in offsets:
            inflight.pop(off, None)

    def committable(self) -> int:
        """The offset to commit: the lowest one still in flight, else the next one to pull (-1: unknown)."""
        if self.inflight:
            return next(iter(self.inflight))
        return self.next_offset

    def begin_consume(self, n: int) -> None:
        self.running += n
        self.idle.clear()

    def end_consume(self, n: int) -> None:
        self.running -= n
        if self.running <= 0:
            self.running = 0
            self.idle.set()


def allocate_averagely(mqs: list[MessageQueue], cids: list[str], me: str) -> list[MessageQueue]:
    """RocketMQ's AllocateMessageQueueAveragely over sorted queues and sorted consumer ids.

    Every consumer of a group computes the same split, so each queue has exactly one owner when all of them
    see the same ``mqs`` and ``cids``. A consumer not in ``cids`` gets nothing.
    """
    mqs = sorted(mqs)
    cids = sorted(cids)
    if me not in cids or not mqs:
        return []
    index = cids.index(me)
    n_mq, n_c = len(mqs), len(cids)
    mod = n_mq % n_c
    if n_mq <= n_c:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_c + 1
    else:
        average = n_mq // n_c
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n_mq - start)
    return [mqs[(start + i) % n_mq] for i in range(max(0, count))]
