"""Broker configuration: RocketMQ's BrokerConfig and MessageStoreConfig keys, defaults and startup rules.

One ``broker.conf`` feeds both classes by key name, as in RocketMQ. Differences from RocketMQ, each deliberate:
- unknown keys and bad values are errors (see ``common.conf``);
- ``haListenPort`` defaults to 0, meaning ``listenPort + 1``; a positive value is honoured (4.x overwrote it);
- ``fastListenPort`` (RocketMQ always derives it as ``listenPort - 2``): -1, the default, keeps that rule; 0 turns
  the fast (VIP) port off; a positive value is used as is;
- a SLAVE's ``accessMessageInMemoryMaxRatio`` is not lowered by 10 (4.x meant to, but never did);
- ``haSlaveFallbehindMax`` is a 64-bit value (4.x used an int, capping it at 2 GiB);
- RocketMQ's disk thresholds that were JVM system properties (``diskSpaceWarningLevelRatio`` 90,
  ``diskSpaceCleanForciblyRatio`` 85) are ordinary keys;
- the HA stream additions of DESIGN.md §3: ``haAuthSecret`` and ``haSlaveCatchUpFrom``.
"""

from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

from common import conf
from common.errors import ConfigError

# Environment variables that may override a few deployment keys (DESIGN.md §6).
ENV_OVERRIDES = {"NAMESRV_ADDR": "namesrvAddr", "BROKER_IP1": "brokerIP1", "BROKER_IP2": "brokerIP2"}

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class CatchUpFrom(enum.Enum):
    """Where an empty slave starts copying: the master's oldest byte, or RocketMQ's newest-file rule."""

    MIN_OFFSET = "MIN_OFFSET"
    LAST_FILE = "LAST_FILE"


def _local_address() -> str:
    """First non-loopback IPv4 address, as RocketMQ's NetworkUtil picks it; 127.0.0.1 when there is none."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))  # no packet is sent for a UDP connect
            addr = probe.getsockname()[0]
            if not addr.startswith("127."):
                return addr
    except OSError:
        pass
    return "127.0.0.1"


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m 2h"`` -> delays in milliseconds, level 1 first."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out = []
    for item in text.split():
        unit = item[-1:]
        if unit not in units or not item[:-1].isdigit():
            raise ValueError(f"messageDelayLevel: {item!r} is not <number><s|m|h|d>")
        out.append(int(item[:-1]) * units[unit])
    if not out:
        raise ValueError("messageDelayLevel: at least one level is needed")
    return out


@dataclass(frozen=True)
class MessageStoreConfig:
    store_path_root_dir: str = "~/store"
    store_path_commit_log: str = ""  # empty: <storePathRootDir>/commitlog
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    sync_flush_timeout: int = 5000
    slave_timeout: int = 3000
    max_message_size: int = 4 * 1024 * 1024
    check_crc_on_recover: bool = True
    # RocketMQ's default. Appends are pwrite calls, so pre-touching a file saves them only the page-cache allocation
    # (~0.06 s per GiB here) and costs ~2.5 s of CPU per GiB in a burst at every commitlog roll.
    warm_mapped_file_enable: bool = False
    access_message_in_memory_max_ratio: int = 40
    max_transfer_bytes_on_message_in_memory: int = 262_144
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 65_536
    max_transfer_count_on_message_in_disk: int = 8
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    flush_delay_offset_interval: int = 10_000
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"  # hours of the day (two digits, ';'-separated) when expired files are deleted
    disk_max_used_space_ratio: int = 75  # above it, expired files are deleted at any hour
    disk_space_clean_forcibly_ratio: int = 85  # above it, the oldest files go even if not expired
    disk_space_warning_level_ratio: int = 90  # above it, writes are refused until space returns
    clean_resource_interval: int = 10_000
    ha_listen_port: int = 0  # 0: listenPort + 1
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32_768
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    ha_master_address: str = ""
    ha_slave_catch_up_from: CatchUpFrom = CatchUpFrom.MIN_OFFSET
    ha_auth_secret: str = ""
    offset_check_in_slave: bool = False

    def __post_init__(self) -> None:
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue % 20:
            # RocketMQ's getter rounds up to a whole number of 20-byte units; do it once here.
            rounded = (self.mapped_file_size_consume_queue // 20 + 1) * 20
            object.__setattr__(self, "mapped_file_size_consume_queue", rounded)
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ValueError("accessMessageInMemoryMaxRatio must be a percentage between 0 and 100")
        for key, value in (
            ("diskMaxUsedSpaceRatio", self.disk_max_used_space_ratio),
            ("diskSpaceCleanForciblyRatio", self.disk_space_clean_forcibly_ratio),
            ("diskSpaceWarningLevelRatio", self.disk_space_warning_level_ratio),
        ):
            if not 0 < value <= 100:
                raise ValueError(f"{key} must be a percentage between 1 and 100")
        if self.ha_transfer_batch_size <= 0:
            raise ValueError("haTransferBatchSize must be positive")
        if self.max_message_size <= 0:
            raise ValueError("maxMessageSize must be positive")
        parse_delay_levels(self.message_delay_level)

    # derived paths ------------------------------------------------------------------------------------------
    @property
    def root_dir(self) -> Path:
        return Path(os.path.expanduser(self.store_path_root_dir))

    @property
    def commitlog_dir(self) -> Path:
        if self.store_path_commit_log:
            return Path(os.path.expanduser(self.store_path_commit_log))
        return self.root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.root_dir / "consumequeue"

    @property
    def config_dir(self) -> Path:
        return self.root_dir / "config"

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)


@dataclass(frozen=True)
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=socket.gethostname)
    broker_id: int = 0
    namesrv_addr: str = ""
    broker_ip1: str = field(default_factory=_local_address, metadata={"key": "brokerIP1"})
    broker_ip2: str = field(default="", metadata={"key": "brokerIP2"})  # empty: same as brokerIP1
    listen_port: int = 10911
    fast_listen_port: int = -1  # -1: listenPort - 2 (RocketMQ's VIP channel); 0: off
    metrics_exporter_type: str = "PROM"
    metrics_prom_exporter_port: int = 5557
    metrics_prom_exporter_host: str = ""  # empty: all interfaces
    slave_read_enable: bool = False
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6000
    slave_synchronize_interval: int = 10_000
    flush_consumer_offset_interval: int = 5000
    broker_permission: int = 6
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    broker_suspend_max_time_millis: int = 15_000
    max_reconsume_times: int = 16
    send_dedup_window_seconds: int = 600

    def __post_init__(self) -> None:
        if not self.broker_name or not all(c.isalnum() or c in "-_%|" for c in self.broker_name):
            raise ValueError(f"brokerName {self.broker_name!r} must use letters, digits, '-' or '_'")
        if self.broker_permission not in (2, 4, 6):
            raise ValueError("brokerPermission must be 2 (write), 4 (read) or 6 (read and write)")
        if not 0 <= self.listen_port < 65536:
            raise ValueError("listenPort must be between 0 and 65535")
        if not -1 <= self.fast_listen_port < 65536:
            raise ValueError("fastListenPort must be -1 (listenPort - 2), 0 (off) or a port up to 65535")
        if self.metrics_exporter_type not in ("PROM", "DISABLE"):
            raise ValueError("metricsExporterType must be PROM or DISABLE")
        for part in filter(None, self.namesrv_addr.split(";")):
            host, _, port = part.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"namesrvAddr entry {part!r} is not host:port (separate several with ';')")

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_list(self) -> list[str]:
        return [p for p in self.namesrv_addr.split(";") if p]


@dataclass(frozen=True)
class BrokerSettings:
    """Both halves of one broker.conf, after RocketMQ's startup rules were applied."""

    broker: BrokerConfig
    store: MessageStoreConfig
    source: str = "<defaults>"

    @property
    def role(self) -> BrokerRole:
        return self.store.broker_role

    @property
    def ha_port(self) -> int:
        return self.store.ha_listen_port if self.store.ha_listen_port > 0 else self.broker.listen_port + 1

    @property
    def fast_port(self) -> int:
        """The fast (VIP) remoting port, 0 when off: ``listenPort - 2`` unless ``fastListenPort`` says otherwise
        (a listenPort of 0, "any free port", has no such neighbour, so the fast port is then off)."""
        port = self.broker.fast_listen_port
        if port >= 0:
            return port
        return self.broker.listen_port - 2 if self.broker.listen_port > 2 else 0

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker.broker_ip2 or self.broker.broker_ip1}:{self.ha_port}"

    def with_ports(self, *, listen_port: int, ha_port: int, metrics_port: int | None = None) -> BrokerSettings:
        """Copy with bound ports filled in (used when the conf asked for port 0)."""
        broker = replace(self.broker, listen_port=listen_port)
        if metrics_port is not None:
            broker = replace(broker, metrics_prom_exporter_port=metrics_port)
        return replace(self, broker=broker, store=replace(self.store, ha_listen_port=ha_port))


def load_broker_settings(path: str | Path | None, environ: dict[str, str] | None = None) -> BrokerSettings:
    """Load broker.conf strictly and apply RocketMQ's startup rules (role vs. brokerId)."""
    source = str(path) if path else "<defaults>"
    overrides = conf.env_overrides(environ if environ is not None else dict(os.environ), ENV_OVERRIDES)
    broker, store = conf.load((BrokerConfig, MessageStoreConfig), path, overrides=overrides)
    if store.broker_role.is_master and broker.broker_id != 0:
        # RocketMQ forces masters to id 0; say so instead of doing it silently.
        raise ConfigError(
            f"brokerRole={store.broker_role.name} needs brokerId=0, got {broker.broker_id}",
            source=source,
            key="brokerId",
            hint="set brokerId=0 for a master, or brokerRole=SLAVE for a slave",
        )
    if store.broker_role is BrokerRole.SLAVE and broker.broker_id <= 0:
        raise ConfigError(
            "a SLAVE needs brokerId >= 1",
            source=source,
            key="brokerId",
            hint="give each slave of a brokerName its own id starting at 1",
        )
    return BrokerSettings(broker=broker, store=store, source=source)
