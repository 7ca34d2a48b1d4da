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

This module holds the commands; what the cluster is (members, directories, confs, secrets, certificates) is
``ctl.dev_layout``, and running its processes (launch, boot wait, /proc checks, stop) is ``ctl.dev_processes``.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from ctl.dev_layout import (
    ADMIN_SECRET_FILE,
    ADMIN_USER,
    CLUSTER_NAME,
    CONTROLLER_MODE,
    INNER_SECRET_FILE,
    MODE_FILE,
    Member,
    controller_conf,
    ensure_certs,
    ensure_ha_secret,
    ensure_secret_file,
    etcd_conf,
    is_controller_mode,
    member_conf,
    members,
    paths,
    secure_conf,
    write_conf,
)
from ctl.dev_processes import (
    STOP_TIMEOUT_S,
    alive,
    etcd_binary,
    launch,
    read_pid,
    running_members,
    signal_pid,
    stop_all,
    wait_boot,
)
from ctl.options import JsonOpt
from ctl.output import Column, Output
from ctl.progress import Progress, ProgressOpt

app = typer.Typer(help="Run a local cluster of processes (no Docker).", no_args_is_help=True)

DirOpt = Annotated[Path, typer.Option("--dir", help="Directory for confs, logs, pid files and stores.")]

STATUS_COLUMNS = [
    Column("Process", "name"),
    Column("PID", "pid"),
    Column("Addr", "addr"),
    Column("Status", "status"),
    Column("Log", "log"),
]


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
            signal_pid(pid, signal.SIGCONT)
        signal_pid(pid, sig)
        if action in ("kill", "stop", "restart"):
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while alive(pid, p["conf"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid, p["conf"]):
                signal_pid(pid, signal.SIGKILL)
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
