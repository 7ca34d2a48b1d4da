"""``common.process.serve``: what start-up built is frozen out of the cyclic collector's full collections before the
server is ready (issue 22 item 7: scrapes' allocations triggered full collections of the whole heap, 30-50 ms
stalls of the event loop), and a SIGTERM stops the service cleanly."""

from __future__ import annotations

import gc
import os
import signal

from common.process import serve


class Built:
    def __init__(self) -> None:
        self.table: list[list[int]] = []
        self.stopped = False

    async def start(self) -> None:
        self.table = [[i] for i in range(1000)]  # start-up state: containers the collector would scan

    async def stop(self) -> None:
        self.stopped = True


async def test_serve_freezes_start_up_state_before_ready_and_stops_on_sigterm():
    gc.unfreeze()
    service, frozen = Built(), []

    def on_ready(ready: Built) -> None:
        frozen.append(gc.get_freeze_count())
        os.kill(os.getpid(), signal.SIGTERM)

    async def make() -> Built:
        return service

    try:
        assert await serve(make, on_ready=on_ready) == 0
    finally:
        gc.unfreeze()
    assert frozen and frozen[0] >= len(service.table) and service.stopped
