"""Attack on a master's HA port (issue 22 item 2): silent sockets against the handshake slots.

Real processes on 127.0.0.1: a nameserver, a SYNC_MASTER and its slave (short HA intervals, as the tests use).
Two phases, each ending with the slave killed and restarted:
- ``quiet``: no attack, the reference;
- ``attack``: ``--connections`` silent TCP connections to the HA port from ``--hosts`` loopback addresses (the
  slave's own 127.0.0.1 among them), each reopened as soon as the master closes it (``harness.ha_flood``).
Per phase: connections the attacker opened, seconds from the slave's restart to the master showing it OK, the
p99 and the outcomes of probe SYNC sends (one at a time, ``--probe-s`` seconds, started once the slave was back),
the master's CPU seconds over the phase, its peak RSS (VmHWM, since boot) and the refusal lines it logged.
Before issue 22 the slave stayed out for about 76 s under 80 sockets; the run takes well under a minute now.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cpu import cpu_s
from bench.report import print_table, write_json
from client import AdminClient, Message, Producer, SendStatus
from harness.procs import REPO_ROOT, Broker, Namesrv

TOPIC = "AttackHaBench"
BROKER = "broker-atk"
HA_CONF = {"haHousekeepingInterval": 3000, "haSendHeartbeatInterval": 500}


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def p99(samples: list[float]) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def slave_ok(admin: AdminClient, master: Broker) -> bool:
    try:
        st = await admin.ha_status(master.addr)
    except Exception:  # noqa: BLE001 - a busy master may time out a status read: not yet
        return False
    return any(s.broker_id == 1 and s.state == "OK" for s in st.slaves)


async def wait_for(cond, timeout_s: float, what: str) -> float:
    t0 = time.monotonic()
    while not await cond():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"after {timeout_s:.0f} s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


def start_flood(addr: str, connections: int, hosts: int) -> subprocess.Popen:
    """The attacker in a process of its own (``harness.ha_flood``), so its work never delays the probes."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "harness.ha_flood", addr, str(connections), str(hosts)],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if "flood ready" not in line:
        proc.kill()
        raise RuntimeError(f"the flood did not start: {line!r}")
    return proc


def stop_flood(proc: subprocess.Popen) -> dict[str, int]:
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return {k: int(v) for k, v in (kv.split("=") for kv in last.split())} if "connects=" in last else {}


async def phase(name: str, args, master: Broker, slave: Broker, admin: AdminClient, producer: Producer) -> dict:
    log_before = len(master.output().splitlines())
    cpu0 = cpu_s(master.pid)
    flood = start_flood(master.ha_addr, args.connections, args.hosts) if name == "attack" else None
    stats: dict[str, int] = {}
    try:
        slave.kill()
        await wait_for(lambda: _not_ok(admin, master), 20, "the master to see the slave go")
        restarted = time.monotonic()
        slave.start()
        await wait_for(lambda: slave_ok(admin, master), 120, "the slave back")
        reconnect_s = time.monotonic() - restarted  # includes the slave process's boot
        latencies, outcomes = [], {}
        end = time.monotonic() + args.probe_s
        while time.monotonic() < end:
            t = time.monotonic()
            try:
                result = await producer.send(Message(TOPIC, b"probe" * 20))
                status = result.status.name
            except Exception as exc:  # noqa: BLE001 - a failed probe is a figure, not a crash
                status = type(exc).__name__
            latencies.append((time.monotonic() - t) * 1000)
            outcomes[status] = outcomes.get(status, 0) + 1
    finally:
        if flood is not None:
            stats = stop_flood(flood)
    new_lines = master.output().splitlines()[log_before:]
    return {
        "phase": name,
        "connections": stats.get("connects", 0),
        "open_at_end": stats.get("open", 0),
        "reconnect_s": round(reconnect_s, 2),
        "probe_p99_ms": round(p99(latencies), 2),
        "probes": len(latencies),
        "send_ok": outcomes.get(SendStatus.SEND_OK.name, 0),
        "outcomes": outcomes,
        "master_cpu_s": round(cpu_s(master.pid) - cpu0, 2),
        "master_peak_rss_mib": round(peak_rss_mib(master.pid), 1),
        "refusal_log_lines": sum("HA peer" in x for x in new_lines),
    }


async def _not_ok(admin: AdminClient, master: Broker) -> bool:
    return not await slave_ok(admin, master)


async def main_async(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="pyrmq-attack-ha-", dir=args.tmp))
    ns = master = slave = None
    admin = producer = None
    try:
        ns = Namesrv(root / "ns").start()
        master = Broker(root / "m", name=BROKER, namesrv_addr=ns.addr, role="SYNC_MASTER", slaveTimeout=3000,
                        **HA_CONF).start()
        slave = Broker(root / "s", name=BROKER, namesrv_addr=ns.addr, role="SLAVE", broker_id=1,
                       haMasterAddress=master.ha_addr, **HA_CONF).start()
        admin = await AdminClient(ns.addr).start()
        producer = await Producer("attack-ha-bench", ns.addr).start()
        await admin.update_topic(master.addr, TOPIC, read_queue_nums=1, write_queue_nums=1)
        await wait_for(lambda: slave_ok(admin, master), 30, "the slave connected")
        runs = [await phase(name, args, master, slave, admin, producer) for name in ("quiet", "attack")]
    finally:
        if producer is not None:
            await producer.stop()
        if admin is not None:
            await admin.stop()
        for proc in (slave, master, ns):
            if proc is not None:
                proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    print_table(
        f"HA port attack: {args.connections} silent sockets from {args.hosts} addresses, slave killed and restarted",
        ["phase", "connections", "reconnect s", "probe p99 ms", "SEND_OK/probes", "master CPU s", "peak RSS MiB",
         "refusal lines"],
        [[r["phase"], r["connections"], r["reconnect_s"], r["probe_p99_ms"], f"{r['send_ok']}/{r['probes']}",
          r["master_cpu_s"], r["master_peak_rss_mib"], r["refusal_log_lines"]] for r in runs],
    )
    return {"args": vars(args), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attack_ha")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=20, help="source addresses 127.0.0.1..127.0.0.N")
    parser.add_argument("--probe-s", type=float, default=5.0, help="seconds of probe sends per phase")
    parser.add_argument("--tmp", default=None, help="directory for the stores (default: system temp)")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    write_json("attack_ha", result)
    attack = result["runs"][-1]
    return 0 if attack["send_ok"] == attack["probes"] else 1


if __name__ == "__main__":
    sys.exit(main())
