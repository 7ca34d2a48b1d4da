"""The broker's controller-mode keys (RocketMQ 5's BrokerConfig names and defaults where it has them).

``enableControllerMode=true`` makes the controller decide the broker's role and id: ``brokerRole`` and ``brokerId``
of the conf are ignored, as in RocketMQ. ``controllerAddr`` lists the controllers (``;``-separated host:port; a
nameserver with ``enableControllerInNamesrv=true`` is one). Keys RocketMQ does not have are marked pyrmq's.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import conf

_MS = "milliseconds"


@dataclass(frozen=True)
class ControllerModeConfig:
    enable_controller_mode: bool = False
    controller_addr: str = ""
    # how long the controller keeps this broker alive after a heartbeat (sent in every heartbeat)
    controller_heart_beat_timeout_mills: int = conf.ranged(10_000, 100, conf.JAVA_INT_MAX, _MS)
    broker_heartbeat_interval: int = conf.ranged(1000, 10, conf.JAVA_INT_MAX, _MS)
    # how often the broker reads its group's replica info from the controller (pushes make it faster)
    sync_broker_metadata_period: int = conf.ranged(5000, 10, conf.JAVA_INT_MAX, _MS)
    # SEND_OK only once every SyncStateSet member acked (RocketMQ's default is false; controller mode's is true here)
    all_ack_in_sync_state_set: bool = True
    # a SyncStateSet member that has not caught up for this long is dropped from the set
    ha_max_time_slave_not_catchup: int = conf.ranged(15_000, 100, conf.JAVA_INT_MAX, _MS)
    check_sync_state_set_period: int = conf.ranged(5000, 10, conf.JAVA_INT_MAX, _MS)
    broker_election_priority: int = conf.ranged(conf.JAVA_INT_MAX, 0, conf.JAVA_INT_MAX, "lower is preferred")
    # pyrmq's: a master stops answering SEND_OK this long before the controller may take it for dead
    # (broker/controller_mode/fence.py; the margin covers clock-rate drift between the two hosts)
    controller_fence_margin_mills: int = conf.ranged(1000, 0, conf.JAVA_INT_MAX, _MS)

    def __post_init__(self) -> None:
        conf.validate_ranges(self)
        if self.enable_controller_mode and not self.controller_addrs:
            raise ValueError("enableControllerMode=true needs controllerAddr (host:port of each controller, "
                             "';'-separated)")
        for part in self.controller_addrs:
            host, _, port = part.rpartition(":")
            if not host or not (port.isascii() and port.isdigit() and 0 < int(port) <= conf.PORT_MAX):
                raise ValueError(f"controllerAddr entry {part!r} is not host:port (separate several with ';')")
        if self.controller_fence_margin_mills >= self.controller_heart_beat_timeout_mills:
            raise ValueError("controllerFenceMarginMills must be below controllerHeartBeatTimeoutMills")

    @property
    def controller_addrs(self) -> list[str]:
        return [p.strip() for p in self.controller_addr.split(";") if p.strip()]
