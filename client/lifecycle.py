"""The life of the SDK's clients (Producer, PushConsumer, PullConsumer, AdminClient): ``async with`` runs the block
on a started client and stops it when the block ends, also when it raised; a stop of a client that never started
has nothing to undo."""

from __future__ import annotations

from typing import Self


class Lifecycle:
    """Base of a client with ``start()`` (returning the client) and ``stop()``; ``_state`` goes created -> started
    -> stopping -> stopped."""

    _state: str

    async def start(self) -> Self:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _begin_stop(self) -> bool:
        """True when the client was started and is stopping now; a client that was not is only marked stopped."""
        if self._state != "started":
            self._state = "stopped"
            return False
        self._state = "stopping"
        return True
