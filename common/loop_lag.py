"""How late the event loop runs what is due: the ``rocketmq_event_loop_lag_seconds`` histogram.

Everything a server does shares one event loop, so a stall anywhere (a long handler, a scrape, a GIL-holding
thread, a starved CPU) delays every request by as much. ``LoopLagProbe`` sleeps ``INTERVAL_S`` at a time and
observes how much later than due it woke: an operator reads stalls as they happen (``histogram_quantile`` over
the buckets), and ``bench/metrics_bench.py`` reads the broker's own figures during scrapes (issue 22 item 7).
A probe every 100 ms costs about 0.02 % of a core; a stall shorter than the interval is seen by the probes that
fall due during it.
"""

from __future__ import annotations

import asyncio

from common.metrics import BatchHistogram
from common.service import Service

INTERVAL_S = 0.1
LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def loop_lag_histogram() -> BatchHistogram:
    histogram = BatchHistogram("rocketmq_event_loop_lag_seconds",
                               f"How late the event loop ran a timer due every {INTERVAL_S:g} s (stalls of every "
                               "request on this process).", LOOP_LAG_BUCKETS)
    histogram.observe(0.0, 0)  # exported (all zero) before the first probe
    return histogram


class LoopLagProbe(Service):
    def __init__(self, histogram: BatchHistogram, interval_s: float = INTERVAL_S) -> None:
        super().__init__("loop-lag")
        self.histogram = histogram
        self.interval_s = interval_s

    async def on_start(self) -> None:
        self.spawn("probe", self._probe())

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval_s
            if await self.sleep(self.interval_s):
                return
            self.histogram.observe(max(0.0, loop.time() - due))
