"""The cost curve: what one master/slave pair costs as the load grows, for people sizing a cluster.

Each point is the deployment of ``bench.deploy_bench`` (nameserver, master of the role, its slave, a producer
process and a push-consumer process, all fresh, default configuration), run with one knob moved from the base
point (64 senders x 1 KiB, one topic, one consumer group):

- ``senders``: 1, 8, 64, 256 closed-loop senders (each waits for its result);
- ``body``: 128 B, 1 KiB, 16 KiB, 256 KiB (msg/s and MiB/s);
- ``groups``: 1, 4, 16 consumer groups on the topic (fan-out: every group gets every message);
- ``topics``: 1, 100, 1,000 topics (8 queues each) the senders take in turn, the consumer subscribed to all;
- ``backlog``: a consumer that starts ``--backlog-mib`` behind: the producer fills the backlog
  (``--backlog-body`` messages) with no consumer, then the master is stopped, the page cache dropped (``echo 1
  > /proc/sys/vm/drop_caches``; pages a running broker maps are never dropped, hence the restart) and the master
  started again, ``fincore`` reporting how much of its commitlog is resident at each step; only then the consumer
  starts; the window runs from its start
  until it has the whole backlog. Its msg/s is the consumer's.

Per point, over the measured window: msg/s (sent; consumed for ``backlog``), MiB/s of bodies, ack (send)
p50/p99, deliveries/s, CPU µs per message of each process (nameserver, master, slave, producer, consumer;
per message sent, per message consumed for ``backlog``), the brokers' RSS at the end of the window, errors.

``cost_per_work`` says where the cost grows faster than the work: the processes' total CPU per unit of work
(per message; per delivery for ``groups``; per KiB of body for ``body``) at each point over the sweep's first
point, so 1.0 everywhere is cost that grows with the work and more is cost that grows faster.

Writes ``<out-dir>/scaling.json`` and one chart per sweep, ``<out-dir>/scaling_<sweep>.png``. On a shared
2-core machine msg/s moves by ±30 % run to run; CPU per message is steadier. Never passes or fails.

Usage::

    python -m bench.scaling --quick                       # every sweep, short points, 256 MiB backlog
    python -m bench.scaling --seconds 10 --backlog-mib 5120
    python -m bench.scaling --sweep senders=1,64 --roles sync
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.cpu import settle  # noqa: E402
from bench.deploy_bench import ROLES, ClientProc, diff_counts, marked, start_cluster  # noqa: E402
from bench.report import RESULTS_DIR, print_table, write_json  # noqa: E402

SWEEPS: dict[str, list[int]] = {  # in the order they run: the longest last
    "senders": [1, 8, 64, 256],
    "body": [128, 1024, 16384, 262144],
    "groups": [1, 4, 16],
    "backlog": [],  # one point: --backlog-mib
    "topics": [1, 100, 1000],
}
BASE = {"senders": 64, "body": 1024, "groups": 1, "topics": 1}
PROCESSES = ("namesrv", "master", "slave", "producer", "consumer")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
UNIT = {"senders": "message", "body": "KiB of body", "groups": "delivery", "topics": "message", "backlog": "message"}


def rss_mib(pid: int) -> float:
    """Resident set of ``pid`` in MiB (VmRSS: anonymous memory plus the mapped file pages it touched)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def resident_bytes(folder: Path) -> int | None:
    """Bytes of the files under ``folder`` in the page cache (util-linux ``fincore``); None without it."""
    files = [str(p) for p in sorted(folder.glob("*")) if p.is_file()]
    if not files or not shutil.which("fincore"):
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files],
                         check=False, capture_output=True, text=True, timeout=60).stdout
    return sum(int(x) for x in out.split() if x.isdigit())


async def cold_master(master, commitlog: Path) -> dict:
    """Stop the master, write back and drop the clean page cache where the kernel lets this process (root in a VM),
    start the master again on the same store: its reads of the backlog then come from the disk. The restart is
    needed because the broker maps its commitlog files whole, and pages a process has mapped are not dropped.
    Says what it did and how much of the commitlog was resident at each step."""
    before = resident_bytes(commitlog)
    master.stop()
    os.sync()
    try:
        DROP_CACHES.write_text("1\n")
        how = "master stopped, echo 1 > /proc/sys/vm/drop_caches, master started"
    except OSError as exc:
        how = f"not dropped ({exc.strerror}): the backlog must outgrow free memory instead"
    dropped = resident_bytes(commitlog)
    await master.start()
    await settle(master.pid)
    restarted = resident_bytes(commitlog)  # the recovery's reads
    if how.startswith("master"):
        DROP_CACHES.write_text("1\n")
        how += ", echo 1 > /proc/sys/vm/drop_caches"
    return {"page_cache": how, "commitlog_resident_mib_before": mib(before),
            "commitlog_resident_mib_after_drop": mib(dropped), "commitlog_resident_mib_after_restart": mib(restarted),
            "commitlog_resident_mib_at_consumer_start": mib(resident_bytes(commitlog))}


def mib(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 1)


def point_knobs(sweep: str, value: int, args) -> dict:
    knobs = dict(BASE)
    if sweep == "backlog":
        knobs.update(body=args.backlog_body, backlog_mib=value)
    else:
        knobs[sweep] = value
    return knobs


async def run_point(tree, role: str, sweep: str, value: int, args, root: Path) -> dict:
    knobs = point_knobs(sweep, value, args)
    work = root / f"{sweep}-{value}-{role}"
    servers, clients = [], []
    try:
        ns, master, slave, ns_addr = await start_cluster(tree, role, work, servers)
        await settle(master.pid, slave.pid)
        stamp = f"{sweep}_{value}_{role}_{int(time.time() * 1000) % 10_000_000}"
        topic_args = ["--namesrv", ns_addr, "--topic", f"Scaling_{stamp}", "--topics", str(knobs["topics"])]
        producer = ClientProc(tree, work, "producer", *topic_args, "--group", f"ScalingProducer_{stamp}",
                              "--senders", str(knobs["senders"]), "--body", str(knobs["body"]))
        clients.append(producer)
        ready = await producer.start(timeout_s=90 + knobs["topics"] / 5)
        if not ready["ready"]:
            raise RuntimeError(f"no SEND_OK from the {ROLES[role]} within 60 s: {ready['probes']}")
        consumer = ClientProc(tree, work, "consumer", *topic_args, "--group", f"ScalingConsumer_{stamp}",
                              "--groups", str(knobs["groups"]))
        pids = {"namesrv": ns.pid, "master": master.pid, "slave": slave.pid, "producer": producer.pid}
        extra: dict = {}
        producer.send("start")
        if sweep == "backlog":
            extra = await fill_backlog(producer, knobs, args)
            del pids["producer"]  # stopped: the window is the consumer's
            extra.update(await cold_master(master, work / "master" / "store" / "commitlog"))
            pids["master"] = master.pid
            clients.append(consumer)
            await consumer.start(timeout_s=90)
            pids["consumer"] = consumer.pid
            (c0,), cpu0 = await marked(pids, [consumer])
            (c1,), cpu1 = await drain(pids, consumer, extra["backlog_messages"], args)
            p0 = p1 = {"sent": 0, "statuses": {}, "errors": {}, "t": 0.0, **extra.pop("ack")}
        else:
            clients.append(consumer)
            await consumer.start(timeout_s=90 + knobs["topics"] / 5)
            pids["consumer"] = consumer.pid
            await asyncio.sleep(args.warmup)
            extra["consuming_after_s"] = await first_delivery(consumer, limit_s=120 + knobs["topics"] / 5)
            (p0, c0), cpu0 = await marked(pids, [producer, consumer])
            await asyncio.sleep(args.seconds)
            (p1, c1), cpu1 = await marked(pids, [producer, consumer])
        return point_row(sweep, value, role, knobs, p0, p1, c0, c1, cpu0, cpu1,
                         {"master": rss_mib(master.pid), "slave": rss_mib(slave.pid)}, extra)
    finally:
        for c in reversed(clients):
            await c.stop()
        for s in reversed(servers):
            s.stop()
        shutil.rmtree(work, ignore_errors=True)


async def fill_backlog(producer: ClientProc, knobs: dict, args) -> dict:
    """Send until ``backlog_mib`` of bodies are stored (or ``--fill-limit`` seconds pass), then stop the senders;
    the ack percentiles are those of the last second of filling."""
    target, started, last = knobs["backlog_mib"] * 2**20, time.monotonic(), {}
    while time.monotonic() - started < args.fill_limit:
        await asyncio.sleep(1.0)
        producer.send("mark")
        last = await producer.read()
        if last["stored"] * knobs["body"] >= target:
            break
    await producer.stop()
    stored = last.get("stored", 0)
    return {"backlog_messages": stored, "backlog_mib_stored": round(stored * knobs["body"] / 2**20, 1),
            "fill_s": round(time.monotonic() - started, 1),
            "ack": {"send_p50_ms": last.get("send_p50_ms"), "send_p99_ms": last.get("send_p99_ms")}}


async def first_delivery(consumer: ClientProc, limit_s: float) -> float:
    """Seconds until the consumer has a message (a push consumer of thousands of queues takes minutes to look up
    their offsets), so that the window measures the steady state; at most ``limit_s``."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        consumer.send("mark")
        if (await consumer.read())["received"]:
            break
        await asyncio.sleep(0.5)
    return round(time.monotonic() - started, 1)


async def drain(pids: dict[str, int], consumer: ClientProc, backlog: int, args) -> tuple[list[dict], dict]:
    """Marks every 0.2 s until the consumer has the whole backlog (or ``--fill-limit`` seconds pass): the window
    ends when the work does."""
    started = time.monotonic()
    while True:
        await asyncio.sleep(0.2)
        reads, cpu = await marked(pids, [consumer])
        if reads[0]["received"] >= backlog or time.monotonic() - started > args.fill_limit:
            return reads, cpu


def point_row(sweep, value, role, knobs, p0, p1, c0, c1, cpu0, cpu1, rss, extra) -> dict:
    consumed = c1["received"] - c0["received"]
    backlog = sweep == "backlog"
    elapsed = (c1["t"] - c0["t"]) if backlog else (p1["t"] - p0["t"])
    messages = consumed if backlog else p1["sent"] - p0["sent"]
    cpu_us = {k: round((cpu1[k] - cpu0[k]) / max(1, messages) * 1e6, 1) for k in cpu0}
    work = {"message": messages, "delivery": consumed, "KiB of body": messages * knobs["body"] / 1024}[UNIT[sweep]]
    total_s = sum(cpu1[k] - cpu0[k] for k in cpu0)
    return {
        "sweep": sweep, "value": value, "role": role, "knobs": knobs,
        "msg_per_s": round(messages / elapsed), "mib_per_s": round(messages * knobs["body"] / elapsed / 2**20, 2),
        "deliveries_per_s": round(consumed / (c1["t"] - c0["t"])),
        "ack_p50_ms": p1["send_p50_ms"], "ack_p99_ms": p1["send_p99_ms"],
        "e2e_p50_ms": c1["e2e_p50_ms"], "e2e_p99_ms": c1["e2e_p99_ms"],
        "cpu_us_per_msg": cpu_us, "cpu_us_per_msg_total": round(sum(cpu_us.values()), 1),
        "cores_busy": round(total_s / elapsed, 2),
        "cpu_us_per_work": round(total_s / max(1, work) * 1e6, 2), "work_unit": UNIT[sweep],
        "rss_mib": rss, "loadavg_1m": round(os.getloadavg()[0], 1), "messages": messages, "consumed": consumed, "elapsed_s": round(elapsed, 2),
        "statuses": diff_counts(p0["statuses"], p1["statuses"]), "errors": diff_counts(p0["errors"], p1["errors"]),
        **extra,
    }


def cost_growth(rows: list[dict]) -> list[dict]:
    """Per sweep and role: total CPU per unit of work at each point over the first point's (1.0: the cost grows
    with the work; above: faster)."""
    out = []
    for (sweep, role) in sorted({(r["sweep"], r["role"]) for r in rows}):
        pts = sorted((r for r in rows if (r["sweep"], r["role"]) == (sweep, role)), key=lambda r: r["value"])
        first = pts[0]["cpu_us_per_work"] or float("nan")
        out.append({"sweep": sweep, "role": role, "work_unit": pts[0]["work_unit"],
                    "cost_per_work": {str(r["value"]): round(r["cpu_us_per_work"] / first, 2) for r in pts}})
    return out


def chart(sweep: str, rows: list[dict], path: Path, note: str) -> Path:
    """One PNG per sweep: throughput, ack latency, CPU per message by process (SYNC and ASYNC side by side) and
    broker RSS, each against the sweep's values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = sorted({r["value"] for r in rows})
    roles = [r for r in ROLES if any(x["role"] == r for x in rows)]
    at = {(r["role"], r["value"]): r for r in rows}
    xs = range(len(values))
    labels = [label(sweep, v) for v in values]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    style = {"sync": "-o", "async": "--s"}

    def series(role, key, sub=None):
        return [(at[(role, v)][key] if sub is None else at[(role, v)][key].get(sub, 0.0)) if (role, v) in at
                else float("nan") for v in values]

    ax = axes[0][0]
    for role in roles:
        ax.plot(xs, series(role, "msg_per_s"), style[role], label=f"{ROLES[role]} msg/s")
    ax.set_ylabel("msg/s" + (" (consumer)" if sweep == "backlog" else ""))
    if sweep == "body":
        twin = ax.twinx()
        for role in roles:
            twin.plot(xs, series(role, "mib_per_s"), style[role], color="tab:green", label=f"{ROLES[role]} MiB/s")
        twin.set_ylabel("MiB/s of bodies")
        twin.legend(loc="center right", fontsize=8)
    if sweep == "groups":
        for role in roles:
            ax.plot(xs, series(role, "deliveries_per_s"), style[role], color="tab:purple",
                    label=f"{ROLES[role]} deliveries/s")
    ax.set_title("throughput")
    ax.legend(loc="center left" if sweep == "body" else "best", fontsize=8)

    ax = axes[0][1]
    for role in roles:
        ax.plot(xs, series(role, "ack_p50_ms"), style[role], label=f"{ROLES[role]} p50")
        ax.plot(xs, series(role, "ack_p99_ms"), style[role], label=f"{ROLES[role]} p99")
    ax.set_yscale("log")
    ax.set_ylabel("ms")
    ax.set_title("ack (send) latency" + (" while filling" if sweep == "backlog" else ""))
    ax.legend(fontsize=8)

    ax = axes[1][0]
    width = 0.8 / max(1, len(roles))
    colors = dict(zip(PROCESSES, ("tab:gray", "tab:red", "tab:orange", "tab:blue", "tab:cyan"), strict=True))
    for i, role in enumerate(roles):
        bottom = [0.0] * len(values)
        pos = [x - 0.4 + width * (i + 0.5) for x in xs]
        for proc in PROCESSES:
            h = [v if v == v else 0.0 for v in series(role, "cpu_us_per_msg", proc)]
            ax.bar(pos, h, width * 0.95, bottom=bottom, color=colors[proc], hatch="" if role == "sync" else "//",
                   label=proc if i == 0 else None, edgecolor="white")
            bottom = [b + x for b, x in zip(bottom, h, strict=True)]
        for x, total in zip(pos, bottom, strict=True):
            if total:
                ax.annotate(f"{total:.0f}", (x, total), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("CPU µs per message" + (" consumed" if sweep == "backlog" else " sent"))
    ax.set_title("CPU per message by process (plain: SYNC, hatched: ASYNC)")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    for role in roles:
        ax.plot(xs, series(role, "rss_mib", "master"), style[role], label=f"{ROLES[role]} master")
        ax.plot(xs, series(role, "rss_mib", "slave"), style[role], label=f"{ROLES[role]} slave")
    ax.set_ylabel("MiB")
    ax.set_title("broker RSS at the end of the window")
    ax.legend(fontsize=8)

    for ax in axes.flat:
        ax.set_xticks(list(xs), labels)
        ax.set_xlabel(XLABEL[sweep])
        ax.grid(alpha=0.3)
    fig.suptitle(f"pyrmq cost curve: {sweep} ({note})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


XLABEL = {"senders": "closed-loop senders", "body": "message body", "groups": "consumer groups (fan-out)",
          "topics": "topics", "backlog": "backlog the consumer starts behind"}


def label(sweep: str, value: int) -> str:
    if sweep == "body":
        return f"{value} B" if value < 1024 else f"{value // 1024} KiB"
    if sweep == "backlog":
        return f"{value} MiB"
    return f"{value:,}"


async def main_async(args, tree, plan: list[tuple[str, int]]) -> list[dict]:
    root = Path(tempfile.mkdtemp(prefix="scaling-", dir=args.workdir or None))
    rows = []
    try:
        for sweep, value in plan:
            for role in args.roles:
                try:
                    row = await run_point(tree, role, sweep, value, args, root)
                except Exception as exc:  # noqa: BLE001 - one failed point is reported, the sweep goes on
                    row = {"sweep": sweep, "value": value, "role": role, "failed": f"{type(exc).__name__}: {exc}"[:2000]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="append", default=[], metavar="NAME[=V1,V2]",
                    help=f"run only these sweeps, optionally at these values (of {', '.join(SWEEPS)})")
    ap.add_argument("--roles", default="sync,async", help="comma-separated: sync (SYNC_MASTER), async (ASYNC_MASTER)")
    ap.add_argument("--quick", action="store_true", help="short points: 3 s windows, 1 s warm-up, 256 MiB backlog")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per point (10; --quick 3)")
    ap.add_argument("--warmup", type=float, default=None, help="unmeasured sending before the window (3; --quick 1)")
    ap.add_argument("--backlog-mib", type=int, default=None, help="MiB of bodies behind the consumer (5120; quick 256)")
    ap.add_argument("--backlog-body", type=int, default=16384, help="body of the backlog's messages (B)")
    ap.add_argument("--fill-limit", type=float, default=600.0, help="seconds at most to fill the backlog")
    ap.add_argument("--tree", default="", metavar="NAME=PATH", help="the pyrmq source tree to run (default: this)")
    ap.add_argument("--workdir", default="", help="where the stores go (default: the system temp folder)")
    ap.add_argument("--out-dir", default=str(RESULTS_DIR), help="where scaling.json and the charts go")
    ap.add_argument("--note", default="", help="a line about the machine's state, kept in the JSON and charts")
    ap.add_argument("--replot", action="store_true", help="only draw the charts again from <out-dir>/scaling.json")
    ap.add_argument("--update", action="store_true",
                    help="keep the points of the sweeps not run now from <out-dir>/scaling.json (each point keeps "
                         "the note and commit of its own run)")
    args = ap.parse_args(argv)
    if args.replot:
        doc = json.loads((Path(args.out_dir) / "scaling.json").read_text())
        ok = [r for r in doc["points"] if "failed" not in r]
        for sweep in dict.fromkeys(r["sweep"] for r in ok):
            chart(sweep, [r for r in ok if r["sweep"] == sweep], Path(args.out_dir) / f"scaling_{sweep}.png",
                  doc["note"])
        return 0
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 3.0)
    args.backlog_mib = args.backlog_mib or (256 if args.quick else 5120)
    args.roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    if not args.roles or any(r not in ROLES for r in args.roles):
        raise SystemExit(f"--roles: of {sorted(ROLES)}")
    plan = sweep_plan(args)

    from bench.trees import checked_trees

    trees, described = checked_trees([args.tree] if args.tree else [])
    load = os.getloadavg()
    kept = kept_points(Path(args.out_dir) / "scaling.json", {s for s, _ in plan}) if args.update else []
    rows: list[dict] = []
    for sweep in dict.fromkeys(s for s, _ in plan):  # the results so far are written after every sweep
        ran = asyncio.run(main_async(args, trees[0], [(s, v) for s, v in plan if s == sweep]))
        for r in ran:
            r.setdefault("note", args.note)
            r.setdefault("tree", described[0].get("commit", "") if described else "")
        rows += ran
        report(args, plan, kept + rows, load, described)
    return 0


def kept_points(path: Path, rerun: set[str]) -> list[dict]:
    """The points of an earlier scaling.json whose sweep is not run again, each labelled with its run's note."""
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    return [{"note": doc.get("note", ""), **r} for r in doc.get("points", []) if r.get("sweep") not in rerun]


def report(args, plan, rows: list[dict], load, described) -> None:
    ok = [r for r in rows if "failed" not in r]
    growth = cost_growth(ok)
    print_table(f"scaling: {args.seconds:.0f} s windows, load average {load[0]:.1f} at the start",
                ["sweep", "value", "role", "msg/s", "MiB/s", "ack p50", "ack p99", "µs/msg", "master", "slave",
                 "producer", "consumer", "RSS master"],
                [[r["sweep"], r["value"], r["role"], r["msg_per_s"], r["mib_per_s"], r["ack_p50_ms"],
                  r["ack_p99_ms"], r["cpu_us_per_msg_total"], r["cpu_us_per_msg"]["master"],
                  r["cpu_us_per_msg"]["slave"], r["cpu_us_per_msg"].get("producer", 0.0),
                  r["cpu_us_per_msg"].get("consumer", 0.0), r["rss_mib"]["master"]] for r in ok])
    for g in growth:
        print(f"{g['sweep']}/{g['role']}: CPU per {g['work_unit']} over the first point: {g['cost_per_work']}")
    for r in rows:
        if "failed" in r:
            print(f"FAILED {r['sweep']}={r['value']} {r['role']}: {r['failed'][:300]}")
    out_dir = Path(args.out_dir)
    loads = [r["loadavg_1m"] for r in ok if "loadavg_1m" in r] or [load[0]]
    note = args.note or (f"{os.cpu_count()} cores, load average {min(loads):.0f}-{max(loads):.0f} over the points, "
                         f"{args.seconds:.0f} s points")
    charts = {}
    for sweep in dict.fromkeys(r["sweep"] for r in rows):
        mine = [r for r in ok if r["sweep"] == sweep]
        if mine:
            charts[sweep] = str(chart(sweep, mine, out_dir / f"scaling_{sweep}.png", mine[0].get("note") or note).name)
    write_json("scaling", {"args": vars(args), "note": note, "loadavg_at_start": load, "trees": described,
                           "base_point": BASE, "points": rows, "cost_growth": growth, "charts": charts},
               directory=out_dir)


def sweep_plan(args) -> list[tuple[str, int]]:
    """(sweep, value) in order: every sweep at its values, or those ``--sweep`` names."""
    chosen: dict[str, list[int]] = {}
    for spec in args.sweep or list(SWEEPS):
        name, _, values = spec.partition("=")
        if name not in SWEEPS:
            raise SystemExit(f"--sweep {spec}: the sweeps are {', '.join(SWEEPS)}")
        default = [args.backlog_mib] if name == "backlog" else SWEEPS[name]
        chosen[name] = [int(v) for v in values.split(",")] if values else default
    return [(name, v) for name, values in chosen.items() for v in values]


if __name__ == "__main__":
    sys.exit(main())
