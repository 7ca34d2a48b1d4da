"""The deployment users run, measured from outside: a nameserver, a master (SYNC_MASTER or ASYNC_MASTER) and
its SLAVE, each a ``python -m namesrv|broker -c conf`` process with the default configuration except addresses,
ports and paths; a producer application and a push-consumer application, each a process of its own using only
the public SDK (``client.Producer``, ``client.PushConsumer``, ``Message``, ``SendStatus`` and, to create the
topic as ``mqadmin updateTopic`` would, ``client.AdminClient``): ``bench/deploy_clients.py``. This module is
the driver: it starts the processes, marks the measured window and reports; it imports no pyrmq package.

The issue's figures for this deployment (gRPC path, 64 senders): 13.4k msg/s SYNC_MASTER, 15.7k ASYNC_MASTER,
51 µs of master CPU per message. Goal: >= 3x that in the same run, and SYNC/ASYNC >= 0.9.

Per run (one tree x one role), everything fresh:
1. nameserver, master (``brokerRole`` = the role), slave (``brokerId=1``, ``brokerRole=SLAVE``); conf keys set:
   brokerName, brokerId, brokerRole, namesrvAddr, brokerIP1=127.0.0.1, listenPort, haListenPort,
   metricsPromExporterPort, storePathRootDir (so: 1 GiB commitlog files, ASYNC_FLUSH, ...). Boot-time CPU is
   waited out (the master and slave go idle).
2. the producer process creates the topic on the cluster (AdminClient defaults: 8 queues), starts a Producer
   with its defaults (send timeout included) and sends probes until one returns SEND_OK (for SYNC_MASTER: the
   slave is connected and acks); the consumer process starts a PushConsumer with its defaults except
   CONSUME_FROM_FIRST_OFFSET (a new group on a new topic) and a listener that only counts.
3. ``--senders`` (64) coroutines each send one 1 KiB message at a time (``await producer.send``) until told
   to stop; after ``--warmup`` seconds the window of ``--seconds`` starts and ends with a mark: both clients
   report their counters and this process reads utime+stime of every process from /proc/<pid>/stat.

Options: ``--senders`` (64) and ``--queues`` (8, the topic's queue count); ``--stages`` turns the master's Prometheus
exporter on and adds where a send's time goes: the producer's mean send latency, the master's replica wait
(append -> HA frame -> slave append -> report -> release, from ``rocketmq_ha_sync_wait_seconds``), the rest
(SDK coalescing, the wire both ways, the master's work around the wait), messages per SEND request and per
replica wait, the master's event-loop lag, total CPU per message of all processes, the cores they kept busy and how many of
their threads waited for a core on average (``runq_wait_cores``, from /proc schedstat: idle cores with no such
wait are a bubble in the pipeline; a wait with busy cores is contention).

Reported per run and as medians per (tree, role): msg/s sent (sends that returned a SendResult) and consumed
in the window, send p50/p99 and end-to-end p50/p99 (born timestamp to listener), CPU µs per message sent of
master, slave, producer, consumer and nameserver, send statuses and errors in the window, and the consumer's
backlog at the end of the window (sends returned minus messages consumed; under SYNC_MASTER a message can be
consumed before its send returns, so it may be a little negative). Then ratios against the first tree (same
role), SYNC/ASYNC per tree, and the issue's goals for every other tree. Writes ``bench/results/deploy_bench.json``.
Never passes or fails.

Trees (``--tree NAME=PATH``, repeatable, see ``bench.trees``): every process of a variant runs that tree's
code; the client processes run this checkout's ``deploy_clients.py`` by path, so a tree needs no copy of it.
Variants are interleaved run by run (ABBA).

Usage::

    python -m bench.deploy_bench --runs 1 --seconds 5                     # this tree, SYNC and ASYNC
    python -m bench.deploy_bench --tree grpc=/work/baseline-grpc --tree remoting=/work/main --runs 3 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CLIENTS = HERE / "deploy_clients.py"  # run by path in a tree's environment
sys.path.insert(0, str(REPO))

from bench.cpu import cpu_s, runq_wait_s, settle  # noqa: E402
from harness.procs import free_port  # noqa: E402

NAMESRV_READY = re.compile(r"The Name Server boot success\. listen=(\S+)")
BROKER_READY = re.compile(r"The broker\[(\S+), (\S+)\] boot success\.")
ROLES = {"sync": "SYNC_MASTER", "async": "ASYNC_MASTER"}
BROKER_NAME = "broker-a"
ISSUE = {"sync_msg_per_s": 13_400, "async_msg_per_s": 15_700, "master_cpu_us_per_msg": 51.0}
GOAL_RATIO, GOAL_SYNC_ASYNC = 3.0, 0.9


class Server:
    """``python -m <module> -c <conf>`` of a tree, ready when its boot line is in its log; fresh ports are picked
    again if one was taken meanwhile (the machine is shared)."""

    def __init__(self, tree, module: str, workdir: Path, name: str, make_conf, ready: re.Pattern) -> None:
        self.tree, self.module, self.workdir, self.name = tree, module, workdir, name
        self.make_conf, self.ready = make_conf, ready
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / f"{name}.log"
        self.conf: dict = {}

    async def start(self, timeout_s: float = 60.0) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            self.conf = self.make_conf()
            conf_path = self.workdir / f"{self.name}.conf"
            conf_path.write_text("".join(f"{k}={v}\n" for k, v in self.conf.items()))
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:  # noqa: ASYNC230 - the driver waits for nothing else
                self.proc = subprocess.Popen(  # noqa: ASYNC220
                    [sys.executable, "-m", self.module, "-c", str(conf_path)],
                    cwd=str(self.workdir), env=self.tree.env(), stdout=log, stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                text = self.log_path.read_bytes()[offset:].decode("utf-8", "replace")
                if self.ready.search(text):
                    return self
                if self.proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            self.stop()
            if "in use" not in text or attempt == 2:
                raise RuntimeError(f"{self.name} ({self.tree.name}) did not boot:\n{text[-3000:]}")
        raise AssertionError("unreachable")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


class ClientProc:
    """A client process: ``deploy_clients.py`` of this checkout run by path; JSON lines out, command lines in."""

    def __init__(self, tree, workdir: Path, role: str, *args: str) -> None:
        self.tree, self.workdir, self.role, self.args = tree, workdir, role, args
        self.proc: asyncio.subprocess.Process | None = None
        self.err_path = workdir / f"{role}.err"

    async def start(self, timeout_s: float = 90.0) -> dict:
        with open(self.err_path, "wb") as err:  # noqa: ASYNC230
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, str(CLIENTS), self.role, *self.args,
                cwd=str(self.workdir), env=self.tree.env(), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=err)
        ready = await self.read(timeout_s)
        client_file = Path(ready.get("client", "")).resolve()
        if not client_file.is_relative_to(self.tree.path):
            raise RuntimeError(f"{self.role} of tree {self.tree.name} imported client from {client_file}")
        return ready

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def read(self, timeout_s: float = 30.0) -> dict:
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except TimeoutError:
            line = b""
        if not line:
            tail = self.err_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.role} process ({self.tree.name}) said nothing:\n{tail}")
        return json.loads(line)

    def send(self, cmd: str) -> None:
        self.proc.stdin.write(f"{cmd}\n".encode())

    async def stop(self) -> dict | None:
        if self.proc is None or self.proc.returncode is not None:
            return None
        out = None
        try:
            self.send("stop")
            out = await self.read(60)
            await asyncio.wait_for(self.proc.wait(), 30)
        except Exception:  # noqa: BLE001 - a client that will not stop is killed; its numbers are already in
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        return out


def scrape(port: int) -> dict[str, float]:
    """The master's /metrics as {family: value summed over its labels} (only the families ``stages`` reads)."""
    import urllib.request

    wanted = ("rocketmq_ha_sync_wait_seconds_sum", "rocketmq_ha_sync_wait_seconds_count",
              "rocketmq_send_requests_total", "rocketmq_send_results_total",
              "rocketmq_event_loop_lag_seconds_sum", "rocketmq_event_loop_lag_seconds_count")
    out = dict.fromkeys(wanted, 0.0)
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
        with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


def stages(p1: dict, m0: dict, m1: dict, sent: int, cpu0: dict, cpu1: dict) -> dict:
    """Where a send's time goes, from outside: the producer's mean send latency; the master's wait for the slave's
    ack of a batch (append -> HA frame -> slave append -> report -> release: ``rocketmq_ha_sync_wait_seconds``);
    the rest (the SDK's coalescing, the request and answer on the wire, the master's work before the append and
    after the release); messages per SEND request (the SDK's coalescing) and per replica wait; the master's event
    loop lag (how late a timer ran: a busy loop delays every stage); total CPU per message of all processes."""
    d = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1}
    waits = d.get("rocketmq_ha_sync_wait_seconds_count", 0.0)
    requests = d.get("rocketmq_send_requests_total", 0.0)
    lags = d.get("rocketmq_event_loop_lag_seconds_count", 0.0)
    mean = p1.get("send_mean_ms", float("nan"))
    wait_ms = d.get("rocketmq_ha_sync_wait_seconds_sum", 0.0) / waits * 1000 if waits else 0.0
    total_cpu = sum(cpu1[k] - cpu0[k] for k in cpu1)
    return {
        "send_mean_ms": mean,
        "stage_replica_wait_ms": round(wait_ms, 3),
        "stage_outside_wait_ms": round(mean - wait_ms, 3) if waits else mean,
        "msgs_per_request": round(d.get("rocketmq_send_results_total", 0.0) / requests, 1) if requests else None,
        "msgs_per_replica_wait": round(sent / waits, 1) if waits else None,
        "master_loop_lag_ms": round(d.get("rocketmq_event_loop_lag_seconds_sum", 0.0) / lags * 1000, 3) if lags else None,
        "total_cpu_us_per_msg": round(total_cpu / max(1, sent) * 1e6, 1),
        "cores_busy": None,
    }


def diff_counts(a: dict, b: dict) -> dict:
    return {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b)) if b.get(k, 0) - a.get(k, 0)}


async def marked(pids: dict[str, int], clients: list[ClientProc]) -> tuple[list[dict], dict[str, float]]:
    """Each client's counters (a ``mark``) and each process's CPU seconds, read around the marks and taken at the
    middle of their span."""
    cpu = {k: cpu_s(p) for k, p in pids.items()}
    for c in clients:
        c.send("mark")
    reads = [await c.read() for c in clients]
    return reads, {k: (v + cpu_s(pids[k])) / 2 for k, v in cpu.items()}


HA_SECRET = "deploy-bench-" + "x" * 32


def tree_broker_keys(tree) -> dict:
    """Keys a tree's broker needs besides the common ones, found in its config module (an older tree refuses keys
    it does not know): ports that would collide between brokers on one host, and the cluster's HA secret."""
    source = (tree.path / "broker" / "config.py").read_text()
    extra = {}
    if "fastListenPort" in source:
        extra["fastListenPort"] = lambda: 0
    if "grpcServerPort" in source:
        extra["grpcServerPort"] = free_port
    if "ha_auth_secret" in source:
        extra["haAuthSecret"] = lambda: HA_SECRET
    return extra


async def start_cluster(tree, role: str, work: Path, servers: list[Server], *, master_metrics: bool = False
                        ) -> tuple[Server, Server, Server, str]:
    """Nameserver, master (``role``) and slave of ``tree``, fresh under ``work``, each appended to ``servers`` as
    it starts (the caller stops them); returns them and the nameserver's address. ``master_metrics``: the master
    serves /metrics (the replica wait and the loop lag of ``--stages``; off by default, as in RocketMQ)."""
    ns = Server(tree, "namesrv", work / "namesrv", "namesrv",
                lambda: {"listenPort": free_port(), "metricsPromExporterPort": free_port()}, NAMESRV_READY)
    servers.append(await ns.start())
    ns_addr = f"127.0.0.1:{ns.conf['listenPort']}"

    extra = tree_broker_keys(tree)

    def broker_conf(broker_id: int, broker_role: str, sub: str):
        return lambda: {
            "brokerName": BROKER_NAME, "brokerId": broker_id, "brokerRole": broker_role,
            "namesrvAddr": ns_addr, "brokerIP1": "127.0.0.1", "listenPort": free_port(),
            "haListenPort": free_port(), "metricsPromExporterPort": free_port(),
            "storePathRootDir": str(work / sub / "store"),
            **{key: value() for key, value in extra.items()},
        }

    plain_conf = broker_conf(0, ROLES[role], "master")

    def master_conf() -> dict:
        return {**plain_conf(), "metricsExporterType": "PROM"} if master_metrics else plain_conf()

    master = Server(tree, "broker", work / "master", "master", master_conf, BROKER_READY)
    servers.append(await master.start())
    slave = Server(tree, "broker", work / "slave", "slave", broker_conf(1, "SLAVE", "slave"), BROKER_READY)
    servers.append(await slave.start())
    return ns, master, slave, ns_addr


async def run_once(tree, role: str, run: int, args, root: Path) -> dict:
    work = root / f"{tree.name}-{role}-{run}"
    servers: list[Server] = []
    clients: list[ClientProc] = []
    try:
        ns, master, slave, ns_addr = await start_cluster(tree, role, work, servers, master_metrics=args.stages)
        settled = await settle(master.pid, slave.pid)

        stamp = f"{tree.name}_{role}_{run}_{int(time.time() * 1000) % 10_000_000}"
        topic = f"Deploy_{stamp}"
        producer = ClientProc(tree, work, "producer", "--namesrv", ns_addr, "--topic", topic,
                              "--group", f"DeployProducer_{stamp}", "--senders", str(args.senders),
                              "--body", str(args.body), "--queues", str(args.queues))
        clients.append(producer)
        ready = await producer.start()
        if not ready["ready"]:
            raise RuntimeError(f"no SEND_OK from the {ROLES[role]} of {tree.name} within 60 s: {ready['probes']}")
        consumer = ClientProc(tree, work, "consumer", "--namesrv", ns_addr, "--topic", topic,
                              "--group", f"DeployConsumer_{stamp}")
        clients.append(consumer)
        await consumer.start()

        pids = {"namesrv": ns.pid, "master": master.pid, "slave": slave.pid,
                "producer": producer.pid, "consumer": consumer.pid}

        metrics_port = master.conf["metricsPromExporterPort"]

        async def mark() -> tuple[dict, dict, dict, dict, dict]:
            (p, c), cpu = await marked(pids, [producer, consumer])
            waits = {k: runq_wait_s(pid) for k, pid in pids.items()}
            return p, c, cpu, (await asyncio.to_thread(scrape, metrics_port) if args.stages else {}), waits

        producer.send("start")
        await asyncio.sleep(args.warmup)
        p0, c0, cpu0, m0, w0 = await mark()
        await asyncio.sleep(args.seconds)
        p1, c1, cpu1, m1, w1 = await mark()
        sent = p1["sent"] - p0["sent"]
        elapsed = p1["t"] - p0["t"]
        consumed = c1["received"] - c0["received"]
        row = {
            "tree": tree.name, "role": role, "run": run,
            "sent_msg_per_s": round(sent / elapsed),
            "consumed_msg_per_s": round(consumed / (c1["t"] - c0["t"])),
            "master_cpu_us_per_msg": round((cpu1["master"] - cpu0["master"]) / max(1, sent) * 1e6, 1),
            "slave_cpu_us_per_msg": round((cpu1["slave"] - cpu0["slave"]) / max(1, sent) * 1e6, 1),
            "producer_cpu_us_per_msg": round((cpu1["producer"] - cpu0["producer"]) / max(1, sent) * 1e6, 1),
            "consumer_cpu_us_per_msg": round((cpu1["consumer"] - cpu0["consumer"]) / max(1, sent) * 1e6, 1),
            "namesrv_cpu_us_per_msg": round((cpu1["namesrv"] - cpu0["namesrv"]) / max(1, sent) * 1e6, 1),
            "master_cores": round((cpu1["master"] - cpu0["master"]) / elapsed, 2),
            "send_p50_ms": p1["send_p50_ms"], "send_p99_ms": p1["send_p99_ms"],
            "e2e_p50_ms": c1["e2e_p50_ms"], "e2e_p99_ms": c1["e2e_p99_ms"],
            # sends returned minus consumed: < 0 when consumed before the ack (SYNC)
            "backlog": p1["stored"] - c1["received"],
            "sent": sent, "consumed": consumed, "elapsed_s": round(elapsed, 3),
            "statuses": diff_counts(p0["statuses"], p1["statuses"]),
            "errors": diff_counts(p0["errors"], p1["errors"]),
            "settled_s": round(settled, 1),
            "topic_created_by": ready.get("topic_created_by"), "probes": ready.get("probes"),
        }
        row.update(stages(p1, m0, m1, sent, cpu0, cpu1))
        row["cores_busy"] = round(sum(cpu1[k] - cpu0[k] for k in cpu1) / elapsed, 2)
        # threads runnable but without a core, on average: ~0 with idle cores means a bubble, not contention
        row["runq_wait_cores"] = round(sum(w1[k] - w0[k] for k in w1) / elapsed, 2)
        row["master_runq_wait_cores"] = round((w1["master"] - w0["master"]) / elapsed, 3)
        ok = row["statuses"].get("SEND_OK", 0)
        row["send_ok_share"] = round(ok / max(1, sent), 4)
        return row
    finally:
        for c in reversed(clients):
            await c.stop()
        for s in reversed(servers):
            s.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


COLUMNS = ["tree", "role", "runs", "sent_msg_per_s", "x_sent", "consumed_msg_per_s", "master_cpu_us_per_msg",
           "x_master_cpu", "slave_cpu_us_per_msg", "producer_cpu_us_per_msg", "consumer_cpu_us_per_msg",
           "send_p50_ms", "send_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "send_ok_share", "backlog",
           "total_cpu_us_per_msg", "cores_busy"]
STAGE_COLUMNS = ["tree", "role", "send_mean_ms", "stage_replica_wait_ms", "stage_outside_wait_ms",
                 "msgs_per_request", "msgs_per_replica_wait", "master_loop_lag_ms", "total_cpu_us_per_msg",
                 "cores_busy", "runq_wait_cores", "master_runq_wait_cores"]


async def main_async(args, trees) -> list[dict]:
    from bench.trees import interleaved

    root = Path(tempfile.mkdtemp(prefix="deploy-bench-", dir=args.workdir or None))
    variants = [(t, r) for t in trees for r in args.roles]
    results = []
    try:
        for run, (tree, role) in interleaved(args.runs, variants):
            row = await run_once(tree, role, run, args, root)
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")
    return results


def summarize(results: list[dict], trees, roles: list[str]) -> tuple[list[dict], list[dict]]:
    from bench.trees import median_rows, ratio

    rows = median_rows(results, ("tree", "role"))
    by = {(r["tree"], r["role"]): r for r in rows}
    for r in rows:
        base = by.get((trees[0].name, r["role"]), {})
        r["x_sent"] = ratio(r.get("sent_msg_per_s"), base.get("sent_msg_per_s"))
        r["x_master_cpu"] = ratio(r.get("master_cpu_us_per_msg"), base.get("master_cpu_us_per_msg"))
        statuses: dict[str, int] = {}
        for x in results:
            if (x["tree"], x["role"]) == (r["tree"], r["role"]):
                for k, v in {**x["statuses"], **{f"error:{e}": n for e, n in x["errors"].items()}}.items():
                    statuses[k] = statuses.get(k, 0) + v
        r["statuses_all_runs"] = statuses
    per_tree = []
    for t in trees:
        s, a = by.get((t.name, "sync")), by.get((t.name, "async"))
        entry = {"tree": t.name, "sync_over_async": ratio(s and s["sent_msg_per_s"], a and a["sent_msg_per_s"])}
        if t is not trees[0]:
            entry["x_sent"] = {role: by[(t.name, role)]["x_sent"] for role in roles if (t.name, role) in by}
            entry["goal_x_sent_met"] = all(v >= GOAL_RATIO for v in entry["x_sent"].values())
            entry["goal_sync_over_async_met"] = entry["sync_over_async"] >= GOAL_SYNC_ASYNC
        per_tree.append(entry)
    return rows, per_tree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="a pyrmq source tree to run (repeatable; ratios against the first; default: this tree)")
    ap.add_argument("--roles", default="sync,async", help="comma-separated: sync (SYNC_MASTER), async (ASYNC_MASTER)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of unmeasured sending before the window")
    ap.add_argument("--senders", type=int, default=64)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8, help="queues of the topic (the producer creates it)")
    ap.add_argument("--stages", action="store_true",
                    help="turn the master's Prometheus exporter on (metricsExporterType=PROM) and report where a "
                         "send's time goes (the exporter costs the master some CPU)")
    ap.add_argument("--workdir", default="", help="where the stores go (default: the system temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep stores, confs and logs")
    ap.add_argument("--out", default="", help="JSON path (default bench/results/deploy_bench.json)")
    args = ap.parse_args(argv)

    from bench.report import print_table, write_json
    from bench.trees import checked_trees

    args.roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    if not args.roles or any(r not in ROLES for r in args.roles):
        raise SystemExit(f"--roles: of {sorted(ROLES)}")
    trees, described = checked_trees(args.tree)
    results = asyncio.run(main_async(args, trees))
    rows, per_tree = summarize(results, trees, args.roles)
    columns = [c for c in COLUMNS if all(c in r for r in rows)]
    print()
    print_table(
        f"deploy: master+slave, {args.senders} senders x {args.body} B, {args.queues} queues, {args.seconds:.0f} s "
        f"windows, "
        f"medians of {args.runs}; ratios against {trees[0].name}",
        columns, [[r[c] for c in columns] for r in rows],
    )
    stage_cols = [c for c in STAGE_COLUMNS if any(c in r for r in rows)]
    print()
    print_table("where a send's time goes (means in the window; the replica wait is the master's, from its /metrics)",
                stage_cols, [[r.get(c) for c in stage_cols] for r in rows])
    for r in rows:
        print(f"statuses {r['tree']}/{r['role']}: {r['statuses_all_runs']}")
    for e in per_tree:
        line = f"{e['tree']}: SYNC/ASYNC {e['sync_over_async']}"
        if "x_sent" in e:
            line += (f"; goal x{GOAL_RATIO} sent msg/s vs {trees[0].name}: {e['x_sent']} "
                     f"({'met' if e['goal_x_sent_met'] else 'not met'}); SYNC/ASYNC >= {GOAL_SYNC_ASYNC}: "
                     f"{'met' if e['goal_sync_over_async_met'] else 'not met'}")
        print(line)
    out = Path(args.out) if args.out else None
    write_json(out.stem if out else "deploy_bench",
               {"args": vars(args),
                "issue_figures": ISSUE, "trees": described, "runs": results, "medians": rows, "per_tree": per_tree},
               directory=out.parent if out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
