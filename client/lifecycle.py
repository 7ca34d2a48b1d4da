"""``async with`` for the SDK's clients (Producer, PushConsumer, PullConsumer, AdminClient): the block runs on a
started client, and the client stops when the block ends, also when it raised."""

from __future__ import annotations

from typing import Self


class Lifecycle:
    """Base of a client with ``start()`` (returning the client) and ``stop()``."""

    async def start(self) -> Self:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
