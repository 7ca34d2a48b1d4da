"""Silent connections to a master's HA port, kept open as an attacker would (issue 22 item 2).

``SilentFlood(addr, n, hosts)`` keeps ``n`` TCP connections to ``addr`` open that never send a byte, spread over
the source addresses ``hosts`` (127.0.0.x all reach loopback on Linux): whenever the master closes one, it is
opened again after ``reopen_s``. ``connects`` counts every connect, ``closed_by_master`` every close the master
made. Tests and ``bench/attack_ha.py`` run it next to a real master and slave.
"""

from __future__ import annotations

import asyncio
import contextlib


class SilentFlood:
    def __init__(self, addr: str, n: int, hosts: tuple[str, ...] = ("127.0.0.1",), reopen_s: float = 0.02) -> None:
        host, _, port = addr.rpartition(":")
        self.target = (host, int(port))
        self.n = n
        self.hosts = hosts
        self.reopen_s = reopen_s
        self.connects = 0
        self.closed_by_master = 0
        self.open = 0
        self._tasks: list[asyncio.Task] = []

    async def start(self, timeout_s: float = 10.0) -> SilentFlood:
        """Start the ``n`` connection loops; returns once each opened its first connection (or ``timeout_s``)."""
        for i in range(self.n):
            self._tasks.append(asyncio.create_task(self._hold(self.hosts[i % len(self.hosts)]), name=f"flood-{i}"))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self.connects < self.n:
                    await asyncio.sleep(0.01)
        return self

    async def _hold(self, source: str) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(*self.target, local_addr=(source, 0))
            except OSError:
                await asyncio.sleep(self.reopen_s)
                continue
            self.connects += 1
            self.open += 1
            try:
                while await reader.read(1 << 16):
                    pass
                self.closed_by_master += 1
            except (ConnectionError, OSError):
                self.closed_by_master += 1
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(self.reopen_s)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def __aenter__(self) -> SilentFlood:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
