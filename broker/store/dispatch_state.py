"""DispatchState: how far the consume queues index the commitlog, and who is told when they grow.

RocketMQ keeps this in ReputMessageService (``reputFromOffset``) and the store's dispatcher list; here the put path
(a master indexes its records in the put's critical section) and the ``Dispatcher`` (recovery, and a slave's tail)
both advance one object, which the facade, flush and cleanup read:

- ``dispatched``: every record below this commitlog offset has its consume-queue unit (cleanup never deletes a
  file past it; ``dispatchBehindBytes`` is the commitlog end minus it). It only grows.
- ``last_put_ts`` / ``last_dispatched_ts``: store timestamps of the newest record put / dispatched, which the
  flushes write into the checkpoint. A slave's dispatcher also records its time as the checkpoint's
  ``physicMsgTimestamp`` (RocketMQ does so), through ``checkpoint``, set by the facade at start.
- dispatch listeners get ``(topic, queue id, max queue offset)`` after units were written (long polling wakes
  its held pulls); append listeners get the new commitlog end after every append (HA wakes its connections).
  A listener that raises is logged and the others still run.

Task-safety: event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.store.checkpoint import StoreCheckpoint
from broker.store.consume_queue_store import ConsumeQueueStore

log = logging.getLogger(__name__)

DispatchListener = Callable[[str, int, int], None]
AppendListener = Callable[[int], None]


class DispatchState:
    __slots__ = (
        "append_listeners",
        "checkpoint",
        "dispatch_listeners",
        "dispatched",
        "last_dispatched_ts",
        "last_put_ts",
        "queues",
        "slave",
    )

    def __init__(self, queues: ConsumeQueueStore, *, slave: bool) -> None:
        self.queues = queues
        self.slave = slave
        self.dispatched = 0
        self.last_put_ts = 0
        self.last_dispatched_ts = 0
        self.checkpoint: StoreCheckpoint | None = None
        self.dispatch_listeners: list[DispatchListener] = []
        self.append_listeners: list[AppendListener] = []

    def advance(self, offset: int) -> None:
        self.dispatched = max(self.dispatched, offset)

    def on_dispatched(self, store_ts: int) -> None:
        """The dispatcher indexed records up to one stored at ``store_ts``."""
        self.last_dispatched_ts = store_ts
        if self.slave and self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = store_ts

    def notify_dispatch(self, topic: str, queue_id: int) -> None:
        if not self.dispatch_listeners:
            return
        cq = self.queues.find(topic, queue_id)
        max_offset = cq.max_offset if cq else 0
        for cb in self.dispatch_listeners:
            try:
                cb(topic, queue_id, max_offset)
            except Exception:
                log.exception("dispatch listener %r failed", cb)

    def notify_append(self, max_offset: int) -> None:
        for cb in self.append_listeners:
            try:
                cb(max_offset)
            except Exception:
                log.exception("append listener %r failed", cb)
