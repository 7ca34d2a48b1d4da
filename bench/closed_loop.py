"""Closed-loop senders: ``senders`` tasks each send one message and wait for its answer, until ``messages`` are
answered. What the producer benchmarks load a broker with (the SDK still coalesces concurrent sends into batches)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def send_closed_loop(producer, make_message: Callable[[], object], messages: int, senders: int) -> None:
    left = messages

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await producer.send(make_message())

    await asyncio.gather(*(sender() for _ in range(senders)))
