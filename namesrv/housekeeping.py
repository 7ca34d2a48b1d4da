"""BrokerHousekeepingService: drop brokers that stopped talking (RocketMQ's ``scanNotActiveBroker``).

A broker whose connection closes is dropped at once by the processors. This scan is the backstop for the silent
cases a closed connection does not reveal: a paused process, a host that vanished without a TCP reset. Every
``scanNotActiveBrokerInterval`` ms it drops each broker silent for longer than its timeout
(``brokerChannelExpiredTime`` unless the broker registered its own) and logs the address and how long it was
silent, so an operator can tell a dead broker from a slow one. Like RocketMQ it then closes the connection the
broker registered over (unless another live broker registered over it too), so a broker that was only frozen
notices when it wakes up and registers again at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from common.service import Service
from namesrv.route_table import Expired, RouteInfoManager

log = logging.getLogger(__name__)


class BrokerHousekeepingService(Service):
    def __init__(self, table: RouteInfoManager, *, scan_interval_ms: int, clock_ms: Callable[[], int],
                 metrics=None) -> None:
        self.metrics = metrics  # namesrv.metrics.NamesrvMetrics or None
        super().__init__("BrokerHousekeepingService")
        self.table = table
        self.scan_interval_ms = scan_interval_ms
        self._clock_ms = clock_ms

    async def on_start(self) -> None:
        self.run_every("scanNotActiveBroker", self.scan_interval_ms / 1000, self.scan_once)

    def scan_once(self) -> list[Expired]:
        expired = self.table.scan_not_active(self._clock_ms())
        if expired and self.metrics is not None:
            self.metrics.on_expired("silence", len(expired))
        for item in expired:
            log.warning(
                "broker %s silent for %d ms (limit %d ms); removed it from the route table",
                item.broker_addr,
                item.silent_ms,
                item.timeout_ms,
            )
            channel = item.channel
            if channel is not None and not self.table.channel_in_use(channel):
                channel.close(f"broker {item.broker_addr} expired")
        return expired
