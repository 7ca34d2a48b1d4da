"""The dev cluster's layout (``mqctl dev``): which processes it has, where each one's files live, and the confs,
secrets and certificates they start from. Its own module so what a dev cluster *is* can be read (and tested)
apart from how its processes are run (``ctl.dev_processes``) and the commands that do it (``ctl.dev``).

Classic mode is the compose cluster's two broker groups on 127.0.0.1 (broker-a SYNC_MASTER + broker-a-s, broker-b
ASYNC_MASTER + broker-b-s, cluster DefaultCluster); controller mode is one etcd, a nameserver running the
controller and ``broker-a-1..3``, ``broker-b-1..3``, whose roles the controller decides. ``DIR/cluster-mode``
records the mode. Each member gets free ports and ``DIR/<process>/`` for its conf, log, pid file, address and
store. The cluster's HA secret is ``DIR/ha-auth-secret`` (mode 0600), generated once and kept, and every broker
conf names it with ``haAuthSecretFile``; ``--secure`` adds a generated CA and certificates in ``DIR/tls`` and the
ACL's admin and inner secrets (0600 files in DIR).
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CLUSTER_NAME = "DefaultCluster"


@dataclass(frozen=True)
class Member:
    name: str  # the compose service name
    module: str  # namesrv | broker
    broker_name: str = ""
    broker_id: int = 0
    role: str = ""


MEMBERS = [
    Member("namesrv", "namesrv"),
    Member("broker-a", "broker", "broker-a", 0, "SYNC_MASTER"),
    Member("broker-a-s", "broker", "broker-a", 1, "SLAVE"),
    Member("broker-b", "broker", "broker-b", 0, "ASYNC_MASTER"),
    Member("broker-b-s", "broker", "broker-b", 1, "SLAVE"),
]
# controller mode: brokerId and role come from the controller (the index only names the process)
CONTROLLER_MEMBERS = [
    Member("etcd", "etcd"),
    Member("namesrv", "namesrv"),
    *(Member(f"{name}-{i}", "broker", name, i) for name in ("broker-a", "broker-b") for i in (1, 2, 3)),
]
MODE_FILE = "cluster-mode"
CONTROLLER_MODE = "controller"


def is_controller_mode(root: Path) -> bool:
    path = root / MODE_FILE
    return path.exists() and path.read_text().strip() == CONTROLLER_MODE


def members(root: Path) -> list[Member]:
    """The processes of the dev cluster in ``root`` (classic unless ``up --controller`` made it)."""
    return CONTROLLER_MEMBERS if is_controller_mode(root) else MEMBERS


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def paths(root: Path, member: Member) -> dict[str, Path]:
    home = root / member.name
    return {
        "home": home,
        "conf": home / f"{member.name}.conf",
        "log": home / f"{member.name}.log",
        "pid": home / f"{member.name}.pid",
        "addr": home / f"{member.name}.addr",
    }


def write_conf(path: Path, values: dict[str, object], sep: str = "=") -> None:
    path.write_text("".join(f"{k}{sep}{v}\n" for k, v in values.items()))


def etcd_conf(home: Path) -> tuple[dict[str, object], str]:
    """etcd's YAML config file (one member on loopback), and its client endpoint."""
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    return {"name": "etcd0", "data-dir": str(home / "etcd0.data"), "listen-client-urls": client,
            "advertise-client-urls": client, "listen-peer-urls": peer, "initial-advertise-peer-urls": peer,
            "initial-cluster": f"etcd0={peer}", "initial-cluster-state": "new", "log-level": "warn",
            "logger": "zap"}, client.removeprefix("http://")


def controller_conf(member: Member, home: Path, namesrv_addr: str, etcd_endpoint: str, file_size_mb: int,
                    ha_secret_file: Path) -> tuple[dict[str, object], str]:
    """A controller-mode member's conf: the nameserver runs the controller on etcd, brokers ask it for roles."""
    values, addr = member_conf(member, home, namesrv_addr, file_size_mb, ha_secret_file)
    if member.module == "namesrv":
        values.update(enableControllerInNamesrv="true", controllerStoreEtcdEndpoints=etcd_endpoint,
                      controllerInstanceId="namesrv-controller")
    else:
        for key in ("brokerId", "brokerRole"):
            values.pop(key)
        values.update(enableControllerMode="true", controllerAddr=namesrv_addr)
    return values, addr


def ensure_ha_secret(root: Path) -> Path:
    """``DIR/ha-auth-secret``: created once (0600, never world-readable, even briefly), then reused."""
    path = root / "ha-auth-secret"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    return path


SECURE_DIR = "tls"  # DIR/tls: the generated CA (ca.pem) and each member's certificate and key
ADMIN_USER = "admin"
ADMIN_SECRET_FILE = "admin-secret"  # DIR/admin-secret (0600): the password of the ACL's first Super user
INNER_SECRET_FILE = "inner-secret"  # DIR/inner-secret (0600): what brokers sign their own calls with


def ensure_secret_file(path: Path) -> str:
    """A random secret kept in ``path`` (0600, created once, then reused); returns it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    value = secrets.token_urlsafe(24)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value


def ensure_certs(root: Path, names: list[str]) -> Path:
    """``DIR/tls``: a CA and a certificate per member, made once by deploy/certs/gen-certs.sh (openssl)."""
    from ctl.errors import DevClusterError
    from harness.debian_pkg import find_or_install

    out = root / SECURE_DIR
    if (out / "ca.pem").exists() and all((out / f"{n}.pem").exists() for n in names):
        return out
    binary, why = find_or_install("openssl", "openssl")
    if binary is None:
        raise DevClusterError(f"--secure needs openssl to make the cluster's certificates: {why}",
                              hint="apt-get install openssl")
    done = subprocess.run(["sh", str(REPO_ROOT / "deploy" / "certs" / "gen-certs.sh"), str(out), *names],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise DevClusterError(f"gen-certs.sh failed: {done.stderr.strip()}", hint="read deploy/certs/gen-certs.sh")
    return out


def secure_conf(member: Member, certs: Path, admin_secret: str, inner_secret: str) -> dict[str, object]:
    """The keys ``--secure`` adds: TLS enforcing on every port of the member (its own certificate; brokers also
    dial with TLS), ACL 2.0 on with ``admin`` as the first Super user."""
    import json

    values: dict[str, object] = {
        "tls.server.mode": "enforcing",
        "tls.server.certPath": certs / f"{member.name}.pem",
        "tls.server.keyPath": certs / f"{member.name}.key",
        "tls.server.trustCertPath": certs / "ca.pem",
        "authenticationEnabled": "true",
        "authorizationEnabled": "true",
        "initAuthenticationUser": json.dumps({"username": ADMIN_USER, "password": admin_secret}),
        "innerClientAuthenticationCredentials": json.dumps({"accessKey": "inner", "secretKey": inner_secret}),
    }
    if member.module == "broker":
        values.update({"tls.enable": "true", "tls.client.trustCertPath": certs / "ca.pem",
                       "tls.client.certPath": certs / f"{member.name}.pem",
                       "tls.client.keyPath": certs / f"{member.name}.key"})
    return values


def member_conf(member: Member, home: Path, namesrv_addr: str, file_size_mb: int,
                ha_secret_file: Path) -> tuple[dict[str, object], str]:
    if member.module == "namesrv":
        port = free_port()
        # its KV config (and, with ACL on, the users next to it) stay in DIR, not in the user's ~/namesrv
        return {"listenPort": port, "metricsExporterType": "PROM", "metricsPromExporterPort": free_port(),
                "kvConfigPath": home / "kvConfig.json"}, f"127.0.0.1:{port}"
    port = free_port()
    return {
        "brokerClusterName": CLUSTER_NAME,
        "brokerName": member.broker_name,
        "brokerId": member.broker_id,
        "brokerRole": member.role,
        "namesrvAddr": namesrv_addr,
        "brokerIP1": "127.0.0.1",
        "listenPort": port,
        "fastListenPort": free_port(),  # its default, listenPort - 2, may be another member's port
        "haListenPort": free_port(),
        "grpcServerPort": free_port(),  # the RocketMQ 5 endpoint: 8081 would be taken by the first broker
        "metricsExporterType": "PROM",  # the servers' default is off (RocketMQ's); a dev cluster shows its metrics
        "metricsPromExporterPort": free_port(),
        "storePathRootDir": str(home / "store"),
        "mappedFileSizeCommitLog": file_size_mb * 1024 * 1024,
        "haAuthSecretFile": str(ha_secret_file),
    }, f"127.0.0.1:{port}"
