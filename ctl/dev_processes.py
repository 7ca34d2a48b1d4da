"""The dev cluster's processes (``mqctl dev``): launching each member detached, waiting for its boot line,
telling from ``/proc`` whether it still runs, and stopping them. Its own module so process supervision is apart
from the cluster's layout (``ctl.dev_layout``) and the commands (``ctl.dev``).

Processes are detached through a short-lived launcher (``start_new_session``), so they outlive mqctl and are
reaped by init, not by the caller. A member is up once it prints its RocketMQ-style boot line (etcd: once its
``/health`` says so). A pid file is trusted only while ``/proc/<pid>/cmdline`` still names that process's conf,
so a recycled pid is never signalled. Stopping sends SIGTERM to every process with a pid file, waits, then
SIGKILLs the stragglers.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ctl.dev_layout import REPO_ROOT, Member, members, paths
from ctl.output import Output

NAMESRV_READY = re.compile(r"The Name Server boot success\. listen=(\S+)")
BROKER_READY = re.compile(r"The broker\[(\S+), (\S+)\] boot success\.")
BOOT_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0

LAUNCHER = (
    "import subprocess, sys\n"
    "with open(sys.argv[2], 'ab') as log:\n"
    "    p = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,"
    " start_new_session=True, cwd=sys.argv[1])\n"
    "print(p.pid)\n"
)


def etcd_binary() -> str:
    from ctl.errors import DevClusterError
    from harness.debian_pkg import find_or_install

    path, why = find_or_install("etcd", "etcd-server")
    if path is None:
        raise DevClusterError(f"no etcd for controller mode: {why}", hint="apt-get install etcd-server")
    return path


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


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it exited between the check and the signal
        pass


def stop_all(root: Path, out: Output) -> list[dict]:
    """SIGTERM every live member (slaves first), wait, SIGKILL what is left; remove the pid files."""
    order = {"broker": 0, "namesrv": 1, "etcd": 2}  # brokers first (slaves before masters), etcd last
    live = sorted(running_members(root), key=lambda mp: (order[mp[0].module], -mp[0].broker_id))
    for _, pid in live:
        signal_pid(pid, signal.SIGCONT)  # a stopped (SIGSTOP) process cannot handle SIGTERM
        signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    stopped = []
    for member, pid in live:
        p = paths(root, member)
        while alive(pid, p["conf"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        how = "SIGTERM"
        if alive(pid, p["conf"]):
            signal_pid(pid, signal.SIGKILL)
            how = "SIGKILL"
        p["pid"].unlink(missing_ok=True)
        stopped.append({"name": member.name, "pid": pid, "stoppedBy": how})
        out.progress(f"stopped {member.name} pid {pid} ({how})")
    for member in members(root):  # pid files of processes that died on their own (or were killed) are stale now
        paths(root, member)["pid"].unlink(missing_ok=True)
    return stopped
