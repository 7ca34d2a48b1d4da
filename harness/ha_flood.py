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


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.ha_flood ADDR N [HOSTS]``: run a flood in a process of its own (as an attacker would,
    so its work lands on no measured event loop); prints ``flood ready`` once every connection opened, and on
    SIGTERM one line ``connects=<n> closed_by_master=<n> open=<n>``."""
    import signal
    import sys

    args = sys.argv[1:] if argv is None else argv
    addr, n = args[0], int(args[1])
    hosts = tuple(f"127.0.0.{i}" for i in range(1, int(args[2]) + 1)) if len(args) > 2 else ("127.0.0.1",)

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        flood = await SilentFlood(addr, n, hosts).start()
        print("flood ready", flush=True)
        await stop.wait()
        still_open = flood.open
        await flood.stop()
        print(f"connects={flood.connects} closed_by_master={flood.closed_by_master} open={still_open}", flush=True)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
