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


def write_conf(path: Path, values: dict[str, object]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))


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


def member_conf(member: Member, home: Path, namesrv_addr: str, file_size_mb: int,
                ha_secret_file: Path) -> tuple[dict[str, object], str]:
    if member.module == "namesrv":
        port = free_port()
        return {"listenPort": port, "metricsExporterType": "PROM", "metricsPromExporterPort": free_port()}, \
            f"127.0.0.1:{port}"
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
    for member in MEMBERS:
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
    argv = [
        sys.executable,
        "-c",
        LAUNCHER,
        str(p["home"]),
        str(p["log"]),
        sys.executable,
        "-m",
        member.module,
        "-c",
        str(p["conf"]),
    ]
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
        if ready.search(text):
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
    progress: ProgressOpt = None,
    json: JsonOpt = False,
):
    """Start one nameserver and broker-a/-s (SYNC_MASTER), broker-b/-s (ASYNC_MASTER) on 127.0.0.1.

    With --wait (the default) it returns once the cluster is ready, as mqctl cluster wait does.
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
    namesrv_addr = ""
    root.mkdir(parents=True, exist_ok=True)
    secret_file = ensure_ha_secret(root)
    try:
        for member in MEMBERS:
            p = paths(root, member)
            p["home"].mkdir(parents=True, exist_ok=True)
            values, addr = member_conf(member, p["home"], namesrv_addr, file_size_mb, secret_file)
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
        groups = len({m.broker_name for m in MEMBERS if m.broker_name})
        state = wait_ready(namesrv_addr, CLUSTER_NAME, groups, 1, timeout_s, Progress(progress))
        data["ready"] = ready_data(namesrv_addr, CLUSTER_NAME, state, {})
        lines = ready_lines(namesrv_addr, CLUSTER_NAME, state, {})
    out.show(data, lines)


def status_rows(root: Path) -> list[dict]:
    rows = []
    for member in MEMBERS:
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
    members = sorted(running_members(root), key=lambda mp: (mp[0].module == "namesrv", -mp[0].broker_id))
    for _, pid in members:
        _signal(pid, signal.SIGCONT)  # a stopped (SIGSTOP) process cannot handle SIGTERM
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    stopped = []
    for member, pid in members:
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
    for member in MEMBERS:  # pid files of processes that died on their own (or were killed) are stale now
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
