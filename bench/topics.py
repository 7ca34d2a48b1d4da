"""Topic set-up the benches share: create a topic on a broker and return once the nameserver routes it, so the
first measured send never meets "no route" (a registration reaches the nameserver moments after updateTopic)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the caller brings its client (a bench may measure another tree's)
    from client import AdminClient


async def create_routed_topic(admin: AdminClient, broker_addr: str, topic: str, queues: int,
                              timeout_s: float = 15.0) -> None:
    """updateTopic on ``broker_addr`` with ``queues`` read and write queues, then wait (polling every 0.1 s) until
    the nameserver's route for ``topic`` has a writable queue; RuntimeError after ``timeout_s``."""
    await admin.update_topic(broker_addr, topic, read_queue_nums=queues, write_queue_nums=queues)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if (await admin.topic_route(topic)).publish_queues:
                return
        except Exception:  # noqa: BLE001, S110 - not routed yet
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the nameserver never routed {topic} within {timeout_s:g} s")
