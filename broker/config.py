"""Broker configuration: RocketMQ's BrokerConfig and MessageStoreConfig keys, defaults and startup rules.

One ``broker.conf`` feeds both classes by key name, as in RocketMQ. Differences from RocketMQ, each deliberate:
- unknown keys, bad values and values outside a key's declared range are errors (see ``common.conf``);
- ``haListenPort`` defaults to 0, meaning ``listenPort + 1``; a port is honoured (4.x overwrote it), a negative one
  refused (it used to become ``listenPort + 1`` silently);
- ``fastListenPort`` (RocketMQ always derives it as ``listenPort - 2``): -1, the default, keeps that rule; 0 turns
  the fast (VIP) port off; a positive value is used as is;
- a SLAVE's ``accessMessageInMemoryMaxRatio`` is not lowered by 10 (4.x meant to, but never did);
- ``haSlaveFallbehindMax`` is a 64-bit value (4.x used an int, capping it at 2 GiB);
- RocketMQ's disk thresholds that were JVM system properties (``diskSpaceWarningLevelRatio`` 90,
  ``diskSpaceCleanForciblyRatio`` 85) are ordinary keys;
- the HA stream additions of DESIGN.md §3: ``haAuthSecret`` / ``haAuthSecretFile`` (the cluster's shared secret:
  only a slave that proves it holds it is served or counts toward SEND_OK; a config read shows ``<set>``, never the
  secret or the file's path), ``haSlaveCatchUpFrom`` and
  ``haDisconnectedSlaveKeepInterval``; a SYNC_MASTER without a secret refuses to start unless
  ``haUnsafeAllowUnauthenticatedSlaves=true`` says the operator accepts that any TCP peer can confirm its sends;
- ``grpcServerPort`` (RocketMQ 5's proxy key, 8081) is the broker's own: every broker serves the v2 endpoint;
- ``serverMaxHeldBytes`` and ``serverFrameTimeoutMillis`` (the nameserver has them too) cap the bytes all remoting
  connections together hold and the time a frame may take to arrive whole (``remoting.held_bytes``);
  ``grpcMaxConcurrentStreams``, ``grpcMaxConnectionAgeMillis`` and ``grpcMaxConnectionIdleMillis`` bound each v2
  connection (``broker.grpc_v2.endpoint``).

The metrics exporter is RocketMQ 5's: off (``metricsExporterType=DISABLE``) unless a conf turns it on with
``metricsExporterType=PROM`` (then ``metricsPromExporterHost``/``metricsPromExporterPort``, 5557). So a nameserver and
brokers started with default confs on one host bind no common port: the nameserver 9876; a broker ``listenPort``
10911, ``fastListenPort`` 10909 (listenPort - 2), ``haListenPort`` 10912 (listenPort + 1, masters only) and
``grpcServerPort`` 8081. A second broker on the host sets its own ``listenPort`` (which moves the two derived ports)
and ``grpcServerPort``.
"""

from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

from broker.auth.config import AuthConfig
from remoting.tls import TlsConfig
from broker.controller_mode.config import ControllerModeConfig
from common import conf
from common.errors import ConfigError
from common.ports import ListenPort, check_exporter_type, clashes, describe_clash, exporter_ports
from remoting.headers import NumberError, parse_int
from remoting.held_bytes import DEFAULT_MAX_HELD_BYTES
from remoting.message_codec import validate_topic

# Environment variables that may override a few deployment keys (DESIGN.md §6).
ENV_OVERRIDES = {"NAMESRV_ADDR": "namesrvAddr", "BROKER_IP1": "brokerIP1", "BROKER_IP2": "brokerIP2",
                 "HA_AUTH_SECRET_FILE": "haAuthSecretFile", "CONTROLLER_ADDR": "controllerAddr"}

MIN_HA_AUTH_SECRET_BYTES = 16
HA_SECRET_HINT = ("generate one secret per cluster (python3 -c 'import secrets; print(secrets.token_hex(32))' > "
                  "ha-auth-secret; chmod 600 ha-auth-secret) and give the master and its slaves the same "
                  "haAuthSecretFile (or haAuthSecret)")

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


# Reasons given with a range error (conf.ranged): what the bounds protect.
_INTERVAL_MS = "milliseconds between runs; 0 would spin the loop, and RocketMQ holds it in an int"
_THOROUGH_MS = "milliseconds between flushes of everything; 0 makes every flush thorough"
_TIMEOUT_MS = "milliseconds to wait; 0 would fail every wait"
_PULL_LIMIT = "a per-pull limit: 0 would return nothing"
_DISK_RATIO = "a percentage of the store's filesystem"


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
        try:
            if unit not in units:
                raise NumberError(f"unit {unit!r}")
            out.append(parse_int(item[:-1], 0, conf.JAVA_INT_MAX) * units[unit])
        except NumberError:
            raise ValueError(f"messageDelayLevel: {item!r} is not <number><s|m|h|d>") from None
    if not out:
        raise ValueError("messageDelayLevel: at least one level is needed")
    return out


@dataclass(frozen=True)
class MessageStoreConfig:
    store_path_root_dir: str = "~/store"
    store_path_commit_log: str = ""  # empty: <storePathRootDir>/commitlog
    mapped_file_size_commit_log: int = conf.ranged(
        1024 * 1024 * 1024, 4096, conf.JAVA_INT_MAX,
        "bytes per commitlog file: at least one 4 KiB page; at most 2 GiB - 1, RocketMQ's int (each file is "
        "fallocated and mapped whole, so a huge value would fail every send at the first file)",
    )
    mapped_file_size_consume_queue: int = conf.ranged(
        300_000 * 20, 20, conf.JAVA_INT_MAX - 20,
        "bytes per consume-queue file: at least one 20-byte unit; at most 2 GiB, RocketMQ's int",
    )
    # pyrmq's: consume-queue files kept open (2 descriptors and a mapping each); idle ones are closed past it and
    # reopened on use, so thousands of auto-created topics cannot exhaust the descriptors. 0: sized from the
    # process's descriptor limit at start (common/fd_limit.py), so active queues are not reopened on every access.
    max_open_consume_queue_files: int = conf.ranged(
        0, 0, 1_000_000, "consume-queue files kept open (0: a quarter of RLIMIT_NOFILE); each holds 2 file descriptors"
    )
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = conf.ranged(500, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    flush_commit_log_least_pages: int = conf.ranged(4, 0, conf.JAVA_INT_MAX, "4 KiB pages; 0 flushes any dirty byte")
    flush_commit_log_thorough_interval: int = conf.ranged(10_000, 0, conf.JAVA_INT_MAX, _THOROUGH_MS)
    flush_interval_consume_queue: int = conf.ranged(1000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    flush_consume_queue_least_pages: int = conf.ranged(2, 0, conf.JAVA_INT_MAX, "4 KiB pages; 0 flushes any dirty byte")
    flush_consume_queue_thorough_interval: int = conf.ranged(60_000, 0, conf.JAVA_INT_MAX, _THOROUGH_MS)
    sync_flush_timeout: int = conf.ranged(5000, 1, conf.JAVA_INT_MAX, _TIMEOUT_MS)
    slave_timeout: int = conf.ranged(3000, 1, conf.JAVA_INT_MAX, _TIMEOUT_MS)
    max_message_size: int = conf.ranged(
        4 * 1024 * 1024, 1, conf.JAVA_INT_MAX, "bytes of one message body; RocketMQ holds it in an int"
    )
    check_crc_on_recover: bool = True
    # The message index (broker/store/index_file.py): query by key and by the UNIQ_KEY msgId. Files are sparse, so
    # RocketMQ's sizes cost disk only as entries arrive; changing the two sizes needs an empty index directory.
    message_index_enable: bool = True
    max_hash_slot_num: int = conf.ranged(5_000_000, 1, 100_000_000, "hash slots per index file (4 bytes each)")
    max_index_num: int = conf.ranged(20_000_000, 2, 100_000_000, "entries per index file (20 bytes each)")
    # RocketMQ's default. Appends are pwrite calls, so pre-touching a file saves them only the page-cache allocation
    # (~0.06 s per GiB here) and costs ~2.5 s of CPU per GiB in a burst at every commitlog roll.
    warm_mapped_file_enable: bool = False
    access_message_in_memory_max_ratio: int = conf.ranged(40, 0, 100, "a percentage of physical memory")
    max_transfer_bytes_on_message_in_memory: int = conf.ranged(262_144, 1, conf.JAVA_INT_MAX, _PULL_LIMIT)
    max_transfer_count_on_message_in_memory: int = conf.ranged(32, 1, conf.JAVA_INT_MAX, _PULL_LIMIT)
    max_transfer_bytes_on_message_in_disk: int = conf.ranged(65_536, 1, conf.JAVA_INT_MAX, _PULL_LIMIT)
    max_transfer_count_on_message_in_disk: int = conf.ranged(8, 1, conf.JAVA_INT_MAX, _PULL_LIMIT)
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    flush_delay_offset_interval: int = conf.ranged(10_000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    file_reserved_time: int = conf.ranged(72, 0, conf.JAVA_INT_MAX, "hours a commitlog file is kept")
    delete_when: str = "04"  # hours of the day (two digits, ';'-separated) when expired files are deleted
    # above it, expired files are deleted at any hour
    disk_max_used_space_ratio: int = conf.ranged(75, 1, 100, _DISK_RATIO)
    # above it, the oldest files go even if not expired
    disk_space_clean_forcibly_ratio: int = conf.ranged(85, 1, 100, _DISK_RATIO)
    # above it, writes are refused until space returns
    disk_space_warning_level_ratio: int = conf.ranged(90, 1, 100, _DISK_RATIO)
    clean_resource_interval: int = conf.ranged(10_000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    ha_listen_port: int = conf.port(0, zero_means="listenPort + 1")
    ha_send_heartbeat_interval: int = conf.ranged(5000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    ha_housekeeping_interval: int = conf.ranged(20_000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    ha_transfer_batch_size: int = conf.ranged(32_768, 1, conf.JAVA_INT_MAX, "bytes per HA transfer")
    ha_slave_fallbehind_max: int = conf.ranged(256 * 1024 * 1024, 0, None, "bytes a slave may lag and stay in sync")
    ha_master_address: str = ""
    ha_slave_catch_up_from: CatchUpFrom = CatchUpFrom.MIN_OFFSET
    # The cluster's HA secret inline; prefer haAuthSecretFile (kept out of the conf). Both are conf.secret(): config
    # reads (--print-config, GET_BROKER_CONFIG) show conf.SECRET_MARKER, never the value or the file's path.
    ha_auth_secret: str = conf.secret()
    ha_auth_secret_file: str = conf.secret()  # a file whose first line is the secret (a Docker secret, a generated file)
    # Opt-out of HA authentication: any TCP peer that sends a hello is served and its acks count. Needed to run a
    # SYNC_MASTER without a secret; never set it where the HA port is reachable by anyone but the slaves.
    ha_unsafe_allow_unauthenticated_slaves: bool = False
    ha_disconnected_slave_keep_interval: int = conf.ranged(
        60_000, 0, conf.JAVA_INT_MAX, "milliseconds a departed slave stays listed (DISCONNECTED) in haStatus")
    offset_check_in_slave: bool = False

    def __post_init__(self) -> None:
        conf.validate_ranges(self)
        if self.ha_auth_secret and self.ha_auth_secret_file:
            raise ValueError("set haAuthSecret or haAuthSecretFile, not both")
        if self.ha_auth_secret and len(self.ha_auth_secret.encode("utf-8")) < MIN_HA_AUTH_SECRET_BYTES:
            raise ValueError(f"haAuthSecret must be at least {MIN_HA_AUTH_SECRET_BYTES} bytes; {HA_SECRET_HINT}")
        if self.ha_unsafe_allow_unauthenticated_slaves and (self.ha_auth_secret or self.ha_auth_secret_file):
            raise ValueError("haUnsafeAllowUnauthenticatedSlaves=true contradicts the configured HA secret; remove "
                             "one of them (keep the secret)")
        if self.mapped_file_size_consume_queue % 20:
            # RocketMQ's getter rounds up to a whole number of 20-byte units; do it once here.
            rounded = (self.mapped_file_size_consume_queue // 20 + 1) * 20
            object.__setattr__(self, "mapped_file_size_consume_queue", rounded)
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

    def read_ha_auth_secret(self) -> bytes:
        """The HA link's shared secret: ``haAuthSecret``, or the first line of ``haAuthSecretFile`` (read now, so a
        restart picks up a rotated file); b"" when neither is set. ValueError says what to fix."""
        if not self.ha_auth_secret_file:
            return self.ha_auth_secret.encode("utf-8")
        path = Path(os.path.expanduser(self.ha_auth_secret_file))
        try:
            lines = path.read_bytes().splitlines()
        except OSError as exc:
            raise ValueError(f"haAuthSecretFile {path} cannot be read ({exc.strerror}); {HA_SECRET_HINT}") from None
        secret = lines[0].strip() if lines else b""
        if len(secret) < MIN_HA_AUTH_SECRET_BYTES:
            raise ValueError(f"haAuthSecretFile {path} holds {len(secret)} bytes on its first line, at least "
                             f"{MIN_HA_AUTH_SECRET_BYTES} are needed; {HA_SECRET_HINT}")
        return secret


@dataclass(frozen=True)
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=socket.gethostname)
    broker_id: int = conf.ranged(0, 0, None, "0 is the master, 1 and up are its slaves")
    namesrv_addr: str = ""
    broker_ip1: str = field(default_factory=_local_address, metadata={"key": "brokerIP1"})
    broker_ip2: str = field(default="", metadata={"key": "brokerIP2"})  # empty: same as brokerIP1
    listen_port: int = conf.port(10911, zero_means="any free port")
    fast_listen_port: int = conf.ranged(
        -1, -1, conf.PORT_MAX, "a TCP port; -1 means listenPort - 2 (RocketMQ's VIP channel), 0 turns it off"
    )
    # RocketMQ 5's default: no exporter unless the conf asks for one (PROM serves /metrics on the port below)
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_port: int = conf.port(5557, zero_means="any free port")
    metrics_prom_exporter_host: str = ""  # empty: all interfaces
    slave_read_enable: bool = False
    enable_property_filter: bool = False  # SQL92 subscriptions (RocketMQ's default: off)
    trace_topic_enable: bool = False  # create msgTraceTopicName (one queue) at start, for message trace records
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    register_name_server_period: int = conf.ranged(30_000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    register_broker_timeout_mills: int = conf.ranged(6000, 1, conf.JAVA_INT_MAX, _TIMEOUT_MS)
    slave_synchronize_interval: int = conf.ranged(10_000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    flush_consumer_offset_interval: int = conf.ranged(5000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    broker_permission: int = 6
    default_topic_queue_nums: int = conf.ranged(
        8, 1, 1024, "queues of an auto-created topic; 1024 is updateTopic's limit too"
    )
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    # pyrmq's bounds on what any client can create by naming it (broker/metadata): beyond them a new name is refused
    # with a remark saying to create it with updateTopic / updateSubGroup or to raise the key.
    max_auto_created_topics: int = conf.ranged(
        10_000, 0, conf.JAVA_INT_MAX, "topics created by sends to unknown topics; 0 refuses every auto-creation")
    max_auto_created_subscription_groups: int = conf.ranged(
        10_000, 0, conf.JAVA_INT_MAX, "groups created by pulls and heartbeats naming new groups; 0 refuses every one")
    # pyrmq's: topics.json and subscriptionGroup.json are written at most once per interval (every change in it
    # shares the write; RocketMQ rewrote the whole file per change)
    flush_metadata_interval: int = conf.ranged(1000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    long_polling_enable: bool = True
    short_polling_time_mills: int = conf.ranged(1000, 0, conf.JAVA_INT_MAX, "milliseconds a pull waits without long polling")
    broker_suspend_max_time_millis: int = conf.ranged(15_000, 0, conf.JAVA_INT_MAX, "milliseconds a pull may be held")
    max_reconsume_times: int = conf.ranged(16, 0, conf.JAVA_INT_MAX, "deliveries before a message goes to %DLQ%")
    send_dedup_window_seconds: int = conf.ranged(600, 0, conf.JAVA_INT_MAX, "seconds; 0 turns send dedup off")
    # pyrmq's, as the nameserver's: bytes the listen and fast ports' connections together may hold in partial
    # frames and unread answers (remoting.held_bytes says why 256 MiB), and the time a frame may take to arrive
    server_max_held_bytes: int = conf.ranged(
        DEFAULT_MAX_HELD_BYTES, 16 * 1024 * 1024, None,
        "bytes; below 16 MiB a single message of the largest size (4 MiB by default) would hardly fit",
    )
    server_frame_timeout_millis: int = conf.ranged(
        30_000, 100, conf.JAVA_INT_MAX, "milliseconds; a frame needs at least a round trip to arrive"
    )
    # RocketMQ 5's key: the apache.rocketmq.v2 endpoint for RocketMQ 5 clients (broker/grpc_v2)
    grpc_server_port: int = conf.port(8081, zero_means="the RocketMQ 5 endpoint is off")
    # pyrmq's bounds of each v2 connection (broker/grpc_v2/endpoint.py says why these values)
    grpc_max_concurrent_streams: int = conf.ranged(
        256, 4, 1_000_000, "streams per connection; a RocketMQ 5 client needs a few (Telemetry and its receives)"
    )
    grpc_max_connection_age_millis: int = conf.ranged(
        1_800_000, 1000, conf.JAVA_INT_MAX, "milliseconds before a connection is asked to reconnect (GOAWAY)"
    )
    grpc_max_connection_idle_millis: int = conf.ranged(
        120_000, 1000, conf.JAVA_INT_MAX, "milliseconds a connection without a stream stays open"
    )
    # transactional messages (RocketMQ BrokerConfig): refuse half messages, first check after, scan period, max checks
    reject_transaction_message: bool = False
    transaction_time_out: int = conf.ranged(6000, 0, conf.JAVA_INT_MAX, "milliseconds a half waits for its first check")
    transaction_check_interval: int = conf.ranged(30_000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    transaction_check_max: int = conf.ranged(15, 0, conf.JAVA_INT_MAX, "checks before a half is discarded")

    def __post_init__(self) -> None:
        if not self.broker_name or not all(c.isalnum() or c in "-_%|" for c in self.broker_name):
            raise ValueError(f"brokerName {self.broker_name!r} must use letters, digits, '-' or '_'")
        if self.broker_permission not in (2, 4, 6):
            raise ValueError("brokerPermission must be 2 (write), 4 (read) or 6 (read and write)")
        conf.validate_ranges(self)
        check_exporter_type(self.metrics_exporter_type, " (PROM serves /metrics on metricsPromExporterPort)")
        bad_trace_topic = validate_topic(self.msg_trace_topic_name)
        if bad_trace_topic:
            raise ValueError(f"msgTraceTopicName: {bad_trace_topic}")
        for part in filter(None, self.namesrv_addr.split(";")):
            host, _, port = part.rpartition(":")
            if not host or not (port.isascii() and port.isdigit() and 0 < int(port) <= conf.PORT_MAX):
                raise ValueError(f"namesrvAddr entry {part!r} is not host:port (separate several with ';')")

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_exporter_type == "PROM"

    @property
    def namesrv_list(self) -> list[str]:
        return [p for p in self.namesrv_addr.split(";") if p]


@dataclass(frozen=True)
class BrokerSettings:
    """Both halves of one broker.conf, after RocketMQ's startup rules were applied."""

    broker: BrokerConfig
    store: MessageStoreConfig
    source: str = "<defaults>"
    controller: ControllerModeConfig = field(default_factory=ControllerModeConfig)  # enableControllerMode ...
    auth: AuthConfig = field(default_factory=AuthConfig)  # ACL 2.0: authenticationEnabled ... (broker.auth)
    tls: TlsConfig = field(default_factory=TlsConfig)  # tls.server.mode ... (remoting.tls)

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

    def listen_ports(self) -> list[ListenPort]:
        """Every port this broker binds, with the key that sets it: what ``common.ports.check_ports`` checks at
        start so a clash names the key to change."""
        broker, store = self.broker, self.store
        ports = [ListenPort("listenPort", broker.listen_port, hint="fastListenPort = listenPort - 2 and "
                                                                   "haListenPort = listenPort + 1 follow it unless set")]
        if self.fast_port:
            ports.append(ListenPort("fastListenPort", self.fast_port,
                                    derived="listenPort - 2" if broker.fast_listen_port < 0 else "",
                                    hint="0 turns the fast VIP port off"))
        if self.role.is_master and (broker.listen_port or store.ha_listen_port > 0):  # only a master serves slaves
            ports.append(ListenPort("haListenPort", self.ha_port,
                                    derived="listenPort + 1" if store.ha_listen_port <= 0 else ""))
        if broker.grpc_server_port:
            ports.append(ListenPort("grpcServerPort", broker.grpc_server_port,
                                    hint="each broker of a host needs its own; 0 turns the RocketMQ 5 endpoint off"))
        return ports + exporter_ports(broker.metrics_exporter_type, broker.metrics_prom_exporter_port,
                                      broker.metrics_prom_exporter_host)

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
    broker, store, controller, auth, tls = conf.load(
        (BrokerConfig, MessageStoreConfig, ControllerModeConfig, AuthConfig, TlsConfig), path, overrides=overrides)
    auth.check(source)
    tls.check(source)
    if controller.enable_controller_mode:
        # RocketMQ ignores brokerRole and brokerId in controller mode: the controller assigns both. Any broker of
        # the group may become a SYNC_MASTER, so the HA secret is required as for one.
        store = replace(store, broker_role=BrokerRole.SYNC_MASTER)
        broker = replace(broker, broker_id=0)
        check_ha_auth(store, source)
        return BrokerSettings(broker=broker, store=store, source=source, controller=controller, auth=auth, tls=tls)
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
    check_ha_auth(store, source)
    check_store_paths(store, source)
    settings = BrokerSettings(broker=broker, store=store, source=source, auth=auth, tls=tls)
    check_port_clashes(settings)
    return settings


def check_port_clashes(settings: BrokerSettings) -> None:
    """Two keys naming one port (listenPort, its derived fastListenPort and haListenPort, grpcServerPort,
    metricsPromExporterPort) are a configuration error, found at load (exit 2) instead of as a bind error."""
    found = clashes(settings.listen_ports())
    if found:
        first, repeat = found[0]
        raise ConfigError(describe_clash(first, repeat), source=settings.source, key=repeat.key)


# Kernel pseudo-filesystems: a directory there cannot hold files (mkdir says ENOENT, open says EACCES).
PSEUDO_FS_ROOTS = (Path("/proc"), Path("/sys"))


def check_store_paths(store: MessageStoreConfig, source: str) -> None:
    """A store directory under /proc or /sys is refused at load with one line naming the key."""
    for key, path in (("storePathRootDir", store.root_dir), ("storePathCommitLog", store.commitlog_dir)):
        if "\x00" in str(path):  # realpath would raise a bare ValueError
            raise ConfigError("the path holds a NUL byte", source=source, key=key, hint="write a plain directory path")
        real = Path(os.path.realpath(path))
        for root in PSEUDO_FS_ROOTS:
            if real == root or root in real.parents:
                raise ConfigError(
                    f"{path} is on the kernel's {root} pseudo-filesystem, which cannot hold a store",
                    source=source,
                    key=key,
                    hint="name a directory on a real disk (the default is ~/store)",
                )


def check_ha_auth(store: MessageStoreConfig, source: str) -> None:
    """The HA secret is readable, and a SYNC_MASTER has one unless the operator opted out by name: a SYNC_MASTER
    that serves any peer lets a forged peer turn pending sends into SEND_OK (issue 12)."""
    try:
        secret = store.read_ha_auth_secret()
    except ValueError as exc:
        raise ConfigError(str(exc), source=source, key="haAuthSecretFile") from None
    if store.broker_role is BrokerRole.SYNC_MASTER and not secret and not store.ha_unsafe_allow_unauthenticated_slaves:
        raise ConfigError(
            "brokerRole=SYNC_MASTER needs an HA secret: without one any TCP peer that reaches haListenPort can "
            "confirm SYNC sends (SEND_OK) for messages no slave holds",
            source=source,
            key="haAuthSecretFile",
            hint=f"{HA_SECRET_HINT}; or, only where nothing but the slaves can reach the HA port, "
                 "haUnsafeAllowUnauthenticatedSlaves=true",
        )
