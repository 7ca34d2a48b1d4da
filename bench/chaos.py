"""Chaos, the long run: random fault schedules against a real master and slave, SYNC and ASYNC in turn, each
judged by harness.checker; prints how many schedules, faults and messages it tried and what the checker found.

Every schedule is the one of the tests/chaos tier (harness/chaos/schedule.py): load from background SDK
producers and consumers; ``--faults`` faults drawn at random (seeded) from kill / clean restart / pause of master
and slave, a partition of the HA link and a full slave disk, each held 2-8 s, healed and recovered from; then a
drain of the live master and, under load, the master destroyed and the slave drained alone. A schedule with
problems (an acknowledged message lost, an unexpected or aborted read, an inconsistent offset) is a finding;
notes are recoveries that did not come in time.

``python -m bench.chaos --schedules 20 --faults 8`` is the long run (about half a minute per fault on a 2-core
box); ``python -m bench`` runs 2 schedules of 4 faults. ``--no-forced-cleanup`` sets the slave's
diskSpaceCleanForciblyRatio=100, so a full slave disk checks the full disk alone (see the tier's xfail for what
the forced cleanup does). Writes ``bench/results/chaos.json``. Uses harness/procs.py for the processes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.report import print_table, write_json
from harness.chaos.cluster import ChaosCluster, ClusterSpec
from harness.chaos.schedule import FAULT_KINDS, ScheduleResult, ScheduleRunner, random_faults
from harness.checker import Mode
from harness import procs


async def run_one(index: int, mode: Mode, faults, workdir: Path, rate: float, slave_conf: dict) -> ScheduleResult:
    cluster = ChaosCluster(workdir / f"s{index}", procs, ClusterSpec(mode, slave_conf=slave_conf))
    await asyncio.to_thread(cluster.start)
    try:
        return await ScheduleRunner(cluster, f"b{index}", rate=rate).run(faults)
    finally:
        await asyncio.to_thread(cluster.stop)


async def run_all(args: argparse.Namespace) -> list[ScheduleResult]:
    rng = random.Random(args.seed)
    kinds = tuple(args.kinds.split(",")) if args.kinds else FAULT_KINDS
    slave_conf = {"diskSpaceCleanForciblyRatio": 100} if args.no_forced_cleanup else {}
    results = []
    with tempfile.TemporaryDirectory(prefix="pyrmq-chaos-") as tmp:
        for i in range(args.schedules):
            mode = Mode.SYNC if i % 2 == 0 else Mode.ASYNC
            faults = random_faults(rng, args.faults, kinds)
            print(f"schedule {i} [{mode.value}]: " + ", ".join(f"{f.kind} {f.hold_s:g}s" for f in faults), flush=True)
            try:
                result = await run_one(i, mode, faults, Path(tmp), args.rate, slave_conf)
            except Exception as exc:  # noqa: BLE001 - a schedule that could not run is reported, the others go on
                print(f"  schedule {i} did not run to the end: {type(exc).__name__}: {exc}", flush=True)
                continue
            results.append(result)
            for p in result.problems:
                print(f"  PROBLEM: {p}", flush=True)
            for n in result.notes:
                print(f"  note: {n}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=2)
    parser.add_argument("--faults", type=int, default=4, help="faults per schedule")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--rate", type=float, default=60.0, help="messages per second per writer (2 writers)")
    parser.add_argument("--kinds", default="", help="comma-separated fault kinds (default: all of them)")
    parser.add_argument("--no-forced-cleanup", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the SDK's warnings during faults are expected; keep the table readable
    t0 = time.monotonic()
    results = asyncio.run(run_all(args))
    wall = time.monotonic() - t0

    rows = []
    for r in results:
        f = r.final
        rows.append([r.name, r.mode.value, len(r.faults), sum(1 for x in r.faults if x.skipped), f.attempted, f.acked,
                     f.weak, f.failed, f.unknown, f.read, f.duplicated, f.recovered, len(f.lost), len(f.lost_on_slave),
                     len(f.lost_on_slave_below_ack), len(f.unexpected) + len(f.aborted_reads),
                     len(f.inconsistent_offsets), len(r.problems), len(r.notes), r.duration_s])
    print_table("chaos schedules (lost on slave: acked missing on the slave after the master was destroyed; "
                "below ack: of those, wholly below the slave's acked offset)",
                ["schedule", "mode", "faults", "skipped", "sends", "acked", "weak", "failed", "unknown", "read",
                 "dup", "recovered", "lost", "lost on slave", "below ack", "unexpected", "inconsistent",
                 "problems", "notes", "s"], rows)
    kinds = Counter(x.kind for r in results for x in r.faults if not x.skipped)
    totals = {
        "schedules": len(results), "schedules_planned": args.schedules,
        "faults": sum(kinds.values()), "faults_by_kind": dict(sorted(kinds.items())),
        "messages_attempted": sum(r.final.attempted for r in results),
        "messages_acked": sum(r.final.acked for r in results),
        "messages_weak": sum(r.final.weak for r in results),
        "schedules_with_problems": sum(1 for r in results if r.problems),
        "wall_s": round(wall, 1),
    }
    print_table("chaos totals", ["what", "value"], [[k, str(v)] for k, v in totals.items()])
    write_json("chaos", {"args": vars(args), "totals": totals, "schedules": [r.figures() for r in results]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
