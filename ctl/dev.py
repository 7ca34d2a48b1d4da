"""A local cluster for development: `mqctl dev up | status | down --dir DIR`.

``up`` starts one nameserver and the compose cluster's two broker groups as detached local processes on
127.0.0.1 (broker-a SYNC_MASTER + broker-a-s, broker-b ASYNC_MASTER + broker-b-s, cluster DefaultCluster), each
on free ports, with its conf, log, pid file and store under ``DIR/<process>/``. The cluster's HA secret is
``DIR/ha-auth-secret`` (mode 0600), generated on the first ``up`` and kept for later ones (the stores stay too);
every broker conf names it with ``haAuthSecretFile``, so masters serve only their own slaves. It waits for every
RocketMQ-style boot line, then (unless ``--no-wait``) until every slave is in sync (ctl/health.py), and prints the
nameserver address. ``down`` sends SIGTERM to every process with a pid
file, waits, then SIGKILLs the stragglers. A pid file is trusted only while ``/proc/<pid>/cmdline`` still names that
process's conf, so a recycled pid is never signalled.

``up --controller`` starts controller mode instead (issue 23): one etcd (Debian's etcd-server, installed by
``harness.debian_pkg`` when missing, as for the tests), a nameserver running the controller
(``enableControllerInNamesrv``) and two groups of three controller-mode brokers, ``broker-a-1..3`` and
``broker-b-1..3``, whose roles the controller decides; it returns once every group has a master and every member in
its SyncStateSet. ``DIR/cluster-mode`` records the mode for the other commands.

``mqctl kill|stop|start|pause|unpause TARGET --dir DIR`` act on these processes (``dev_lifecycle``): SIGKILL,
SIGTERM, a relaunch with the same conf, SIGSTOP, SIGCONT. ``master -b broker-a`` is the process the nameserver
routes to as brokerId 0 (in controller mode: the master the controller names), ``slave -b broker-a`` the first live
slave; a process name (``broker-a-2``, ``namesrv``, ``etcd``) names itself.

Processes are detached through a short-lived launcher (``start_new_session``), so they outlive mqctl and are
reaped by init, not by the caller.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ctl.options import JsonOpt
from ctl.output import Column, Output
from ctl.progress import Progress, ProgressOpt

app = typer.Typer(help="Run a local cluster of processes (no Docker).", no_args_is_help=True)

REPO_ROOT = Path(__file__).resolve().parents[1]
CLUSTER_NAME = "DefaultCluster"
NAMESRV_READY = re.compile(r"The Name Server boot success\. listen=(\S+)")
BROKER_READY = re.compile(r"The broker\[(\S+), (\S+)\] boot success\.")
BOOT_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0

DirOpt = Annotated[Path, typer.Option("--dir", help="Directory for confs, logs, pid files and stores.")]

LAUNCHER = (
    "import subprocess, sys\n"
    "with open(sys.argv[2], 'ab') as log:\n"
    "    p = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,"
    " start_new_session=True, cwd=sys.argv[1])\n"
    "print(p.pid)\n"
)


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
STATUS_COLUMNS = [
    Column("Process", "name"),
    Column("PID", "pid"),
    Column("Addr", "addr"),
    Column("Status", "status"),
    Column("Log", "log"),
]


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


def etcd_binary() -> str:
    from ctl.errors import DevClusterError
    from harness.debian_pkg import find_or_install

    path, why = find_or_install("etcd", "etcd-server")
    if path is None:
        raise DevClusterError(f"no etcd for controller mode: {why}", hint="apt-get install etcd-server")
    return path


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


def process_state(stat: str | None, cmdline: bytes, conf: Path) -> str:
    """What ``/proc/<pid>`` says of a member's pid: "running" (it runs ``conf``), "gone" (no such process, a
    zombie, or another program), or "exec" (alive with an empty command line: a process between exec and the
    setup of its arguments, which is how a member looks for a moment right after its launch, longer on a busy
    machine; kernel threads look the same, but no pid file names one)."""
    if stat is None:
        return "gone"
    try:
        state = stat.rsplit(")", 1)[1].split()[0]
    except IndexError:
        return "gone"
    if state in ("Z", "X"):
        return "gone"
    if not cmdline:
        return "exec"
    return "running" if str(conf).encode() in cmdline.split(b"\0") else "gone"


def read_process_state(pid: int, conf: Path) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    return process_state(stat, cmdline, conf)


def alive(pid: int, conf: Path) -> bool:
    """True while ``pid`` runs (not a zombie) and its command line still names ``conf``."""
    return read_process_state(pid, conf) == "running"


def read_pid(p: dict[str, Path]) -> int | None:
    try:
        return int(p["pid"].read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def running_members(root: Path) -> list[tuple[Member, int]]:
    found = []
    for member in members(root):
        p = paths(root, member)
        pid = read_pid(p)
        if pid is not None and alive(pid, p["conf"]):
            found.append((member, pid))
    return found


def launch(member: Member, p: dict[str, Path]) -> int:
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)  # the conf names the nameserver; the env would override it
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    server = ([etcd_binary(), "--config-file", str(p["conf"])] if member.module == "etcd"
              else [sys.executable, "-m", member.module, "-c", str(p["conf"])])
    argv = [sys.executable, "-c", LAUNCHER, str(p["home"]), str(p["log"]), *server]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=True)
    pid = int(done.stdout.strip())
    p["pid"].write_text(f"{pid}\n")
    return pid


def wait_boot(member: Member, p: dict[str, Path], pid: int, log_offset: int) -> None:
    from ctl.errors import DevClusterError

    ready = NAMESRV_READY if member.module == "namesrv" else BROKER_READY
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while True:
        with open(p["log"], "rb") as fh:
            fh.seek(log_offset)
            text = fh.read().decode("utf-8", "replace")
        if etcd_healthy(p) if member.module == "etcd" else ready.search(text):
            return
        if read_process_state(pid, p["conf"]) == "gone":  # "exec": just launched, its arguments not set up yet
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise DevClusterError(
                f"{member.name} exited during boot: {tail or 'no output'}",
                hint=f"read {p['log']}; stop the rest with `mqctl dev down --dir {p['home'].parent}`",
            )
        if time.monotonic() >= deadline:
            raise DevClusterError(
                f"{member.name} printed no boot line within {BOOT_TIMEOUT_S:.0f}s",
                hint=f"read {p['log']}; stop the rest with `mqctl dev down --dir {p['home'].parent}`",
            )
        time.sleep(0.1)


def etcd_healthy(p: dict[str, Path]) -> bool:
    import json
    import urllib.error
    import urllib.request

    try:
        url = f"http://{p['addr'].read_text().strip()}/health"
        with urllib.request.urlopen(url, timeout=1) as resp:
            return json.load(resp).get("health") == "true"
    except (urllib.error.URLError, OSError, ValueError):
        return False


@app.command("up")
def up(
    root: DirOpt,
    file_size_mb: Annotated[int, typer.Option("--commitlog-mb", min=1, help="Commitlog file size (MiB).")] = 64,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait until every broker is registered and every slave in sync.")
    ] = True,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=0.0, help="With --wait: give up after this many seconds.")
    ] = 60.0,
    controller: Annotated[bool, typer.Option(
        "--controller", help="Controller mode: etcd, a nameserver with the controller, broker-a-1..3, broker-b-1..3."
    )] = False,
    secure: Annotated[bool, typer.Option(
        "--secure", help="TLS enforcing on every port (a generated CA in DIR/tls) and ACL 2.0 with an admin user."
    )] = False,
    progress: ProgressOpt = None,
    json: JsonOpt = False,
):
    """Start one nameserver and broker-a/-s (SYNC_MASTER), broker-b/-s (ASYNC_MASTER) on 127.0.0.1.

    With --wait (the default) it returns once the cluster is ready, as mqctl cluster wait does; in controller mode
    also once every group has a master and every member in its SyncStateSet. With --secure every port
    (remoting, fast, HA, gRPC) serves TLS only, brokers dial with TLS, and ACL 2.0 is on; it prints the exports
    that point mqctl at the CA and the admin user (whose password stays in DIR/admin-secret).
    """
    from ctl.errors import DevClusterError
    from ctl.health import ready_data, ready_lines, wait_ready

    root = root.resolve()
    running = running_members(root)
    if running:
        names = ", ".join(f"{m.name} (pid {pid})" for m, pid in running)
        raise DevClusterError(
            f"a dev cluster already runs in {root}: {names}",
            hint=f"stop it with `mqctl dev down --dir {root}` or pick another --dir",
        )
    out = Output(json)
    namesrv_addr = etcd_endpoint = ""
    root.mkdir(parents=True, exist_ok=True)
    if controller:
        etcd_binary()  # install it (or say why not) before anything starts
    if controller != is_controller_mode(root) and any((root / m.name).exists() for m in members(root)):
        raise DevClusterError(
            f"{root} holds a {'controller-mode' if is_controller_mode(root) else 'classic'} dev cluster's stores",
            hint="pick another --dir (the two modes' stores and broker names differ)",
        )
    (root / MODE_FILE).write_text((CONTROLLER_MODE if controller else "classic") + "\n")
    secret_file = ensure_ha_secret(root)
    certs = admin_secret = inner_secret = None
    if secure:
        certs = ensure_certs(root, [m.name for m in members(root) if m.module != "etcd"])
        admin_secret = ensure_secret_file(root / ADMIN_SECRET_FILE)
        inner_secret = ensure_secret_file(root / INNER_SECRET_FILE)
        use_secure_client(certs, admin_secret)  # this run's own checks (wait_ready) connect as mqctl users will
    try:
        for member in members(root):
            p = paths(root, member)
            p["home"].mkdir(parents=True, exist_ok=True)
            if member.module == "etcd":
                values, addr = etcd_conf(p["home"])
                write_conf(p["conf"], values, sep=": ")
                etcd_endpoint = addr
            elif controller:
                values, addr = controller_conf(member, p["home"], namesrv_addr, etcd_endpoint, file_size_mb,
                                               secret_file)
            else:
                values, addr = member_conf(member, p["home"], namesrv_addr, file_size_mb, secret_file)
            if member.module != "etcd":
                if certs is not None:
                    values.update(secure_conf(member, certs, admin_secret, inner_secret))
                write_conf(p["conf"], values)
            p["addr"].write_text(addr + "\n")
            if member.module == "namesrv":
                namesrv_addr = addr
            offset = p["log"].stat().st_size if p["log"].exists() else 0
            pid = launch(member, p)
            wait_boot(member, p, pid, offset)
            out.progress(f"started {member.name} pid {pid} at {addr}")
    except BaseException:
        stop_all(root, out)
        raise
    data: dict = {"namesrvAddr": namesrv_addr, "dir": str(root), "processes": status_rows(root)}
    lines = [f"NAMESRV_ADDR={namesrv_addr}"]
    if wait:  # a timeout leaves the processes running, to be looked at (their logs) and stopped with dev down
        group_names = sorted({m.broker_name for m in members(root) if m.broker_name})
        slaves = sum(1 for m in members(root) if m.broker_name == group_names[0]) - 1
        started = time.monotonic()
        state = wait_ready(namesrv_addr, CLUSTER_NAME, len(group_names), slaves, timeout_s, Progress(progress))
        data["ready"] = ready_data(namesrv_addr, CLUSTER_NAME, state, {})
        lines = ready_lines(namesrv_addr, CLUSTER_NAME, state, {})
        if controller:
            left = max(0.0, timeout_s - (time.monotonic() - started))
            groups = wait_sync_state_sets(namesrv_addr, group_names, slaves + 1, left)
            data["syncStateSets"] = groups
            lines.insert(1, "every group has a master and its whole SyncStateSet: "
                         + ", ".join(f"{n} {g}" for n, g in groups.items()))
    if certs is not None:
        exports = secure_exports(root, certs)
        data["secure"] = {"caPath": str(certs / "ca.pem"), "adminUser": ADMIN_USER,
                          "adminSecretFile": str(root / ADMIN_SECRET_FILE)}
        lines += ["TLS enforcing on every port, ACL 2.0 on; point mqctl and the SDK at them with:", *exports]
    out.show(data, lines)


def use_secure_client(certs: Path, admin_secret: str) -> None:
    """This mqctl process connects to the secure cluster as the admin user, with TLS trusting its CA."""
    from ctl.rpc import use_credentials, use_tls

    use_tls(tls=True, ca=str(certs / "ca.pem"))
    use_credentials((ADMIN_USER, admin_secret))


def secure_exports(root: Path, certs: Path) -> list[str]:
    """Shell lines for the caller (the password is read from its file, never printed)."""
    return [f"  export MQCTL_TLS=true MQCTL_TLS_CA={certs / 'ca.pem'}",
            f"  export MQCTL_ACCESS_KEY={ADMIN_USER} MQCTL_SECRET_KEY=$(cat {root / ADMIN_SECRET_FILE})"]


def wait_sync_state_sets(controller_addr: str, names: list[str], size: int, timeout_s: float) -> dict[str, list[int]]:
    """Poll the controller until every group has a master and ``size`` members in its SyncStateSet."""
    import asyncio

    from ctl.controller import fetch_view
    from ctl.errors import DevClusterError
    from remoting.errors import RemotingError

    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while True:
        try:
            view = asyncio.run(fetch_view([controller_addr], names))
            sets = {n: view.groups[n].sync_state_set for n in names if n in view.groups
                    and view.groups[n].master_broker_id}
            if len(sets) == len(names) and all(len(s) == size for s in sets.values()):
                return sets
            last = f"SyncStateSets {sets}"
        except (RemotingError, DevClusterError, Exception) as exc:  # noqa: BLE001 - reported at the deadline
            last = str(exc)
        if time.monotonic() >= deadline:
            raise DevClusterError(f"the controller-mode groups were not whole within {timeout_s:.0f}s ({last})",
                                  hint="read the brokers' logs under --dir; `mqctl getSyncStateSet -b broker-a`")
        time.sleep(0.2)


def status_rows(root: Path) -> list[dict]:
    rows = []
    for member in members(root):
        p = paths(root, member)
        pid = read_pid(p)
        addr = p["addr"].read_text().strip() if p["addr"].exists() else None
        state = "RUNNING" if pid is not None and alive(pid, p["conf"]) else "STOPPED"
        rows.append({"name": member.name, "pid": pid, "addr": addr, "status": state, "log": str(p["log"])})
    return rows


@app.command("status")
def status(root: DirOpt, json: JsonOpt = False):
    """Show the processes of the dev cluster in DIR."""
    Output(json).table(STATUS_COLUMNS, status_rows(root.resolve()))


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it exited between the check and the signal
        pass


def stop_all(root: Path, out: Output) -> list[dict]:
    """SIGTERM every live member (slaves first), wait, SIGKILL what is left; remove the pid files."""
    order = {"broker": 0, "namesrv": 1, "etcd": 2}  # brokers first (slaves before masters), etcd last
    live = sorted(running_members(root), key=lambda mp: (order[mp[0].module], -mp[0].broker_id))
    for _, pid in live:
        _signal(pid, signal.SIGCONT)  # a stopped (SIGSTOP) process cannot handle SIGTERM
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    stopped = []
    for member, pid in live:
        p = paths(root, member)
        while alive(pid, p["conf"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        how = "SIGTERM"
        if alive(pid, p["conf"]):
            _signal(pid, signal.SIGKILL)
            how = "SIGKILL"
        p["pid"].unlink(missing_ok=True)
        stopped.append({"name": member.name, "pid": pid, "stoppedBy": how})
        out.progress(f"stopped {member.name} pid {pid} ({how})")
    for member in members(root):  # pid files of processes that died on their own (or were killed) are stale now
        paths(root, member)["pid"].unlink(missing_ok=True)
    return stopped


@app.command("down")
def down(root: DirOpt, json: JsonOpt = False):
    """Stop the dev cluster in DIR: SIGTERM, wait, then SIGKILL."""
    root = root.resolve()
    out = Output(json)
    stopped = stop_all(root, out)
    if not stopped:
        out.progress(f"no dev cluster process runs in {root}")
    out.show({"dir": str(root), "stopped": stopped}, [])


# kill | stop | start | pause | unpause on a dev cluster (mqctl kill master -b broker-a --dir DIR) ---------------
def _namesrv_addr(root: Path) -> str:
    p = paths(root, Member("namesrv", "namesrv"))
    return p["addr"].read_text().strip() if p["addr"].exists() else ""


def _group_roles(root: Path, broker_name: str) -> tuple[str | None, list[str]]:
    """(the master's address, the slaves' addresses) of a group: the controller's word in controller mode, else
    the nameserver's (brokerId 0 is the master)."""
    from ctl.rpc import Cluster

    namesrv = _namesrv_addr(root)
    if is_controller_mode(root):
        from ctl.controller import group_roles

        return group_roles([namesrv], broker_name)
    with Cluster(namesrv) as cluster:
        addrs = cluster.broker_group(broker_name).broker_addrs
        master = addrs.get(0) or addrs.get("0")
        return master, [a for i, a in sorted(addrs.items(), key=lambda kv: int(kv[0])) if int(i) != 0]


def dev_target(root: Path, target: str, broker_name: str | None) -> Member:
    """The process a chaos command names: ``master``/``slave`` with -b, or a process name."""
    from ctl.errors import DevClusterError, UnknownName

    known = members(root)
    if not (root / "namesrv").exists():
        raise DevClusterError(f"no dev cluster in {root}", hint=f"start one with `mqctl dev up --dir {root}`")
    if target not in ("master", "slave"):
        for member in known:
            if member.name == target:
                return member
        raise UnknownName("process", target, [m.name for m in known],
                          hint="pass master/slave -b <brokerName>, or a process of `mqctl dev status --dir`")
    names = sorted({m.broker_name for m in known if m.broker_name})
    if not broker_name:
        raise typer.BadParameter(f"{target} needs -b <brokerName>, e.g. -b broker-a")
    if broker_name not in names:
        raise UnknownName("broker", broker_name, names, hint=f"pass -b with a broker group of the dev cluster in {root}")
    if not is_controller_mode(root):  # classic: the processes are the roles
        return next(m for m in known if m.broker_name == broker_name and (m.role == "SLAVE") == (target == "slave"))
    master, slaves = _group_roles(root, broker_name)
    wanted = [master] if target == "master" else slaves
    by_addr = {paths(root, m)["addr"].read_text().strip(): m for m in known
               if m.broker_name == broker_name and paths(root, m)["addr"].exists()}
    running = {m.name for m, _ in running_members(root)}
    for addr in wanted:
        member = by_addr.get(addr or "")
        if member is not None and (member.name in running or target == "master"):
            return member
    raise DevClusterError(f"{broker_name} has no {target} now (the controller names master {master or 'none'}, "
                          f"slaves {slaves or 'none'})", hint="see `mqctl getSyncStateSet -b " + broker_name + "`")


def dev_lifecycle(action: str, root: Path, target: str, broker_name: str | None, settle_s: float, json: bool) -> None:
    """One chaos action on a dev cluster process, then clusterList (as the compose form prints it)."""
    from ctl.errors import CtlError, DevClusterError

    root = root.resolve()
    member = dev_target(root, target, broker_name)
    p = paths(root, member)
    pid = read_pid(p)
    live = pid is not None and alive(pid, p["conf"])
    if action == "start":
        if live:
            raise DevClusterError(f"{member.name} runs already (pid {pid})", hint="kill or stop it first")
        offset = p["log"].stat().st_size if p["log"].exists() else 0
        pid = launch(member, p)
        wait_boot(member, p, pid, offset)
        did = f"start {member.name} (pid {pid}) done."
    else:
        if not live:
            raise DevClusterError(f"{member.name} does not run", hint=f"start it with `mqctl start {member.name} "
                                  f"--dir {root}`")
        sig = {"kill": signal.SIGKILL, "stop": signal.SIGTERM, "restart": signal.SIGTERM, "pause": signal.SIGSTOP,
               "unpause": signal.SIGCONT}[action]
        if sig == signal.SIGTERM:
            _signal(pid, signal.SIGCONT)
        _signal(pid, sig)
        if action in ("kill", "stop", "restart"):
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while alive(pid, p["conf"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid, p["conf"]):
                _signal(pid, signal.SIGKILL)
            p["pid"].unlink(missing_ok=True)
        did = f"{action} {member.name} (pid {pid}) done."
        if action == "restart":
            offset = p["log"].stat().st_size if p["log"].exists() else 0
            pid = launch(member, p)
            wait_boot(member, p, pid, offset)
            did = f"restart {member.name} (pid {pid}) done."
    if settle_s:
        time.sleep(settle_s)
    rows: list | None = None
    try:
        from ctl.cluster import CLUSTER_COLUMNS, cluster_rows
        from ctl.output import format_table
        from ctl.rpc import Cluster

        with Cluster(_namesrv_addr(root)) as cluster:
            rows = cluster_rows(cluster)
        state = format_table(CLUSTER_COLUMNS, rows)
    except CtlError as exc:
        state = [f"cluster state unavailable: {exc}"]
    Output(json).show({"dir": str(root), "process": member.name, "did": [did], "cluster": rows}, [did, "", *state])
