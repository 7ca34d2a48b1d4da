"""Controller configuration: RocketMQ 5's ControllerConfig keys that apply, plus the etcd store's, parsed strictly.

RocketMQ's controller keeps its state in DLedger or jRaft (``controllerDLegerPeers`` ...); pyrmq's keeps it in etcd:
``controllerStoreEtcdEndpoints`` lists the etcd members' client addresses (``host:port;host:port``, the separator
RocketMQ uses for ``namesrvAddr``), ``controllerStorePathPrefix`` the key prefix (several pyrmq deployments may share
one etcd). ``controllerLeaseTtlSeconds`` is the active controller's etcd lease: a dead active instance is replaced
within about that long (etcd refuses TTLs under 2 s). ``etcdRequestTimeoutMillis`` bounds every etcd call.

From RocketMQ: ``listenPort`` (9878, the controller's default), ``scanNotActiveBrokerInterval`` (5 s),
``enableElectUncleanMaster`` (false: never elect outside the SyncStateSet), ``notifyBrokerRoleChanged`` (true:
push NOTIFY_BROKER_ROLE_CHANGED to the group's brokers after an election), ``electMasterMaxRetryCount`` (3: here the
compare-and-swap retries of one decision). ``controllerHeartBeatTimeoutMills`` is the broker's key in RocketMQ
(sent in every heartbeat); here it is the default for a heartbeat that omits it, and the wait of a newly active
controller before its scan may call a silent broker dead.

pyrmq's: ``listenHost``, ``controllerAdvertisedAddr`` (what other instances tell brokers to dial; empty: the listen
address, 127.0.0.1 when listening on every interface), ``controllerInstanceId`` (empty: host-pid-random) and the
metrics exporter keys of the nameserver (off unless ``metricsExporterType=PROM``; port 5558).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common import conf
from common.ports import ListenPort, check_exporter_type, exporter_ports
from remoting.headers import parse_host_port

CONTROLLER_DEFAULT_PORT = 9878


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """``host:port[;host:port...]`` (commas accepted too); ValueError names a bad one."""
    parts = [p.strip() for p in text.replace(",", ";").split(";") if p.strip()]
    if not parts:
        raise ValueError("no etcd endpoint given")
    out = []
    for part in parts:
        part = part.removeprefix("http://")
        out.append(parse_host_port(part, "etcd endpoint"))
    return out


@dataclass(frozen=True)
class ControllerConfig:
    listen_port: int = conf.port(CONTROLLER_DEFAULT_PORT, zero_means="any free port")
    listen_host: str = "0.0.0.0"
    controller_advertised_addr: str = ""
    controller_instance_id: str = ""
    controller_store_etcd_endpoints: str = "127.0.0.1:2379"
    controller_store_path_prefix: str = "/pyrmq"
    controller_lease_ttl_seconds: int = conf.ranged(3, 2, 60, "seconds; etcd refuses leases under 2 s")
    etcd_request_timeout_millis: int = conf.ranged(2_000, 100, 60_000, "milliseconds each etcd call may take")
    scan_not_active_broker_interval: int = conf.ranged(5_000, 50, conf.JAVA_INT_MAX,
                                                       "milliseconds between scans; 0 would spin the loop")
    controller_heart_beat_timeout_mills: int = conf.ranged(10_000, 100, conf.JAVA_INT_MAX,
                                                           "milliseconds of broker silence before it counts as dead")
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True
    elect_master_max_retry_count: int = conf.ranged(3, 1, 100, "compare-and-swap attempts of one decision")
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_port: int = conf.port(5558, zero_means="any free port")
    metrics_prom_exporter_host: str = ""
    # a standalone controller's own ACL 2.0 and TLS keys, as RocketMQ's controller has its own auth switch
    # (authenticationEnabled ... tls.server.mode ... in its file); an embedded one is behind its nameserver's
    auth: object = field(default=None, init=False, compare=False, repr=False)  # broker.auth.config.AuthConfig
    tls: object = field(default=None, init=False, compare=False, repr=False)  # remoting.tls.TlsConfig

    def __post_init__(self) -> None:
        conf.validate_ranges(self)
        if not self.listen_host:
            raise ValueError("listenHost: must not be empty (0.0.0.0 listens on every interface)")
        try:
            parse_endpoints(self.controller_store_etcd_endpoints)
        except ValueError as exc:
            raise ValueError(f"controllerStoreEtcdEndpoints: {exc}; give host:port[;host:port...] of etcd") from None
        if not self.controller_store_path_prefix.startswith("/"):
            raise ValueError("controllerStorePathPrefix: must start with '/' (for example /pyrmq)")
        check_exporter_type(self.metrics_exporter_type)

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_exporter_type == "PROM"

    @property
    def etcd_endpoints(self) -> list[tuple[str, int]]:
        return parse_endpoints(self.controller_store_etcd_endpoints)

    def listen_ports(self) -> list[ListenPort]:
        return [ListenPort("listenPort", self.listen_port, host=self.listen_host,
                           hint="brokers then need controllerAddr=<host>:<that port>"),
                *exporter_ports(self.metrics_exporter_type, self.metrics_prom_exporter_port,
                                self.metrics_prom_exporter_host)]


def load_controller_config(path: str | Path | None) -> ControllerConfig:
    """A standalone controller's file: its keys, ACL 2.0's and TLS's (``common.errors.ConfigError`` names a bad
    one)."""
    from broker.auth.config import AuthConfig
    from remoting.tls import TlsConfig

    config, auth, tls = conf.load((ControllerConfig, AuthConfig, TlsConfig), path)
    auth.check(str(path) if path else "<defaults>")
    tls.check(str(path) if path else "<defaults>")
    object.__setattr__(config, "auth", auth)
    object.__setattr__(config, "tls", tls)
    return config
