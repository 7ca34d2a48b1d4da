"""Nameserver configuration: RocketMQ's NamesrvConfig keys that matter to pyrmq, parsed strictly.

The nameserver is usually run with no file at all (RocketMQ's ``sh mqnamesrv``), so every key has a default.
``brokerChannelExpiredTime`` is RocketMQ's hard-coded ``BROKER_CHANNEL_EXPIRED_TIME`` made a key, so tests and
small deployments can expire silent brokers in seconds instead of two minutes. ``scanNotActiveBrokerInterval``
keeps the 4.x default (10 s). ``listenHost`` is pyrmq's: RocketMQ always binds every interface.
``serverChannelMaxIdleTimeSeconds`` is RocketMQ's NettyServerConfig key: a connection that sends nothing for that
long is closed, and a broker registered over it leaves the route (a broker registers every 30 s, so it stays).
``serverMaxHeldBytes`` and ``serverFrameTimeoutMillis`` are pyrmq's: the bytes all connections together may hold
(beyond it large frames are refused and the largest holders closed) and the time a frame may take to arrive whole.
``kvConfigPath`` is where the KV config (``updateTopic -o``'s ORDER_TOPIC_CONFIG) is kept; the file is written
only when a KV entry changes (puts arriving together share one write), and holds at most ``maxKvConfigEntries``
(100,000) entries, ``maxKvConfigEntriesPerNamespace`` (10,000) per namespace.

The metrics exporter takes RocketMQ 5's broker keys and default: off (``metricsExporterType=DISABLE``) unless a conf
sets ``metricsExporterType=PROM``, then on ``metricsPromExporterPort`` (5557). A nameserver and a broker started
with default confs on one host therefore never contend for 5557 (RocketMQ's nameserver has no exporter at all).

``enableControllerInNamesrv=true`` (RocketMQ 5's key, default false) runs the controller of controller mode inside
the nameserver, on its port; the controller's keys (controller.config, ``controllerStoreEtcdEndpoints`` first) are
read from the same file. Keys both declare (``listenPort``, the metrics keys) are the nameserver's.
``CONTROLLER_ADVERTISED_ADDR`` in the environment overrides ``controllerAdvertisedAddr`` (as ``BROKER_IP1`` does a
broker's address): one conf then serves every nameserver of a compose file, each telling peers its own address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from common import conf
from common.ports import NAMESRV_DEFAULT_PORT, ListenPort, check_exporter_type, exporter_ports
from broker.auth.config import AuthConfig
from remoting.tls import TlsConfig
from controller.config import ControllerConfig
from remoting.held_bytes import DEFAULT_MAX_HELD_BYTES

_INTERVAL_MS = "milliseconds between scans; 0 would spin the loop"
# Environment variables that may override a deployment key (DESIGN.md §6), as broker.config's ENV_OVERRIDES.
ENV_OVERRIDES = {"CONTROLLER_ADVERTISED_ADDR": "controllerAdvertisedAddr"}


@dataclass(frozen=True)
class NamesrvConfig:
    listen_port: int = conf.port(NAMESRV_DEFAULT_PORT, zero_means="any free port")
    listen_host: str = "0.0.0.0"
    # ms between scans for silent brokers
    scan_not_active_broker_interval: int = conf.ranged(10_000, 1, conf.JAVA_INT_MAX, _INTERVAL_MS)
    # ms of silence after which a broker is dropped
    broker_channel_expired_time: int = conf.ranged(120_000, 1, conf.JAVA_INT_MAX, "milliseconds; 0 would drop every broker")
    order_message_enable: bool = False  # routes carry orderTopicConf from the KV config (RocketMQ's gate)
    kv_config_path: str = "~/namesrv/kvConfig.json"
    server_channel_max_idle_time_seconds: int = conf.ranged(
        120, 1, conf.JAVA_INT_MAX, "seconds; 0 would close every connection at once"
    )
    # pyrmq's: bytes all connections together may hold in partial frames and unread answers (remoting.held_bytes
    # says why 256 MiB), and how long a frame may take to arrive whole after its first byte
    server_max_held_bytes: int = conf.ranged(
        DEFAULT_MAX_HELD_BYTES, 1024 * 1024, None, "bytes; below 1 MiB a single large route answer would not fit"
    )
    server_frame_timeout_millis: int = conf.ranged(
        30_000, 100, conf.JAVA_INT_MAX, "milliseconds; a frame needs at least a round trip to arrive"
    )
    metrics_exporter_type: str = "DISABLE"  # PROM serves /metrics on metricsPromExporterPort
    metrics_prom_exporter_port: int = conf.port(5557, zero_means="any free port")
    metrics_prom_exporter_host: str = ""  # empty: all interfaces
    # pyrmq's: anyone may PUT_KV_CONFIG, so new keys beyond these are refused (namesrv.kv_config)
    max_kv_config_entries: int = conf.ranged(100_000, 0, conf.JAVA_INT_MAX, "KV config entries in all namespaces")
    max_kv_config_entries_per_namespace: int = conf.ranged(
        10_000, 0, conf.JAVA_INT_MAX, "KV config entries per namespace")
    # RocketMQ 5: run the controller (controller mode) inside this nameserver, on its port; the controller's keys
    # (controllerStoreEtcdEndpoints ...) go in the same file and land in ``controller``
    enable_controller_in_namesrv: bool = False
    controller: ControllerConfig | None = field(default=None, init=False, compare=False, repr=False)
    # ACL 2.0 (broker.auth): authenticationEnabled ... in the same file; users and ACLs next to the KV config
    auth: AuthConfig = field(default_factory=AuthConfig, init=False, compare=False, repr=False)
    # TLS (remoting.tls): tls.server.mode ... in the same file
    tls: TlsConfig = field(default_factory=TlsConfig, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Messages start with the key so the loader prints "<file>: <key>: <problem>".
        conf.validate_ranges(self)  # ports and intervals: the loader checked file values already, this is for code
        if not self.listen_host:
            raise ValueError("listenHost: must not be empty (0.0.0.0 listens on every interface)")
        check_exporter_type(self.metrics_exporter_type)

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_exporter_type == "PROM"

    def listen_ports(self) -> list[ListenPort]:
        """Every port the nameserver binds, with the key that sets it (checked at start: a clash names the key)."""
        return [ListenPort("listenPort", self.listen_port, host=self.listen_host,
                           hint="brokers and clients then need namesrvAddr=<host>:<that port>"),
                *exporter_ports(self.metrics_exporter_type, self.metrics_prom_exporter_port,
                                self.metrics_prom_exporter_host)]


def load_namesrv_config(path: str | Path | None, environ: dict[str, str] | None = None) -> NamesrvConfig:
    """Load ``path`` (``None``: defaults only) plus ``ENV_OVERRIDES``; raises ``common.errors.ConfigError`` naming
    file, key and fix."""
    overrides = conf.env_overrides(environ if environ is not None else dict(os.environ), ENV_OVERRIDES)
    config, controller, auth, tls = conf.load((NamesrvConfig, ControllerConfig, AuthConfig, TlsConfig), path,
                                              overrides=overrides)
    auth.check(str(path) if path else "<defaults>")
    tls.check(str(path) if path else "<defaults>")
    object.__setattr__(config, "auth", auth)
    object.__setattr__(config, "tls", tls)
    if config.enable_controller_in_namesrv:
        object.__setattr__(config, "controller", controller)
    return config
