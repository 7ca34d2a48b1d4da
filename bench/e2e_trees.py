"""``bench.e2e_bench`` on several source trees in one run: e.g. the gRPC path (a worktree of the last gRPC commit)
against the remoting path, interleaved run by run, medians and ratios against the first tree.

Each (run, tree) is one ``python -m bench.e2e_bench --runs 1`` of that tree's own copy of the bench, with
``cwd`` and ``PYTHONPATH`` set to the tree (``bench.trees``), so every process of it (nameserver, broker,
producer, consumer) runs the tree's code: a fresh nameserver and broker per run, the bench's own settle and
``--warmup`` before the measured ``--duration``. Trees run in ABBA order. Arguments after ``--`` go to every
e2e_bench unchanged (e.g. ``-- --consumer process``).

Prints per-run rows, then a table of medians per tree and variant with ratios against the first tree
(``x_msg_s``: msg/s, ``x_broker_cpu``: broker CPU µs per message), and the issue's goal for every other tree:
msg/s >= 2x the first tree's and broker CPU <= 10 µs per message (information only: never passes or fails).
Writes ``bench/results/e2e_trees.json``.

Usage::

    git -C /work/main worktree add /work/baseline-grpc f10761f     # once: the last gRPC commit
    python -m bench.e2e_trees --tree grpc=/work/baseline-grpc --tree remoting=/work/main --runs 3 --duration 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.report import print_table, write_json
from bench.trees import checked_trees, interleaved, median_rows, ratio

GOAL_MSG_RATIO = 2.0
GOAL_BROKER_CPU_US = 10.0
COLUMNS = [  # shown when present in every row (a tree's e2e_bench may have fewer or other fields)
    "msg_per_s", "x_msg_s", "broker_cpu_us_per_msg", "x_broker_cpu", "client_cpu_us_per_msg",
    "send_p50_ms", "send_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "msgs_per_rpc", "received",
]


def run_one(tree, run: int, args, extra: list[str], scratch: Path) -> list[dict]:
    out = scratch / f"{tree.name}-{run}.json"
    cmd = [sys.executable, "-m", "bench.e2e_bench", "--runs", "1", "--duration", str(args.duration),
           "--warmup", str(args.warmup), "--variants", args.variants, "--out", str(out), *extra]
    log_path = scratch / f"{tree.name}-{run}.log"
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, check=False, cwd=str(tree.path), env=tree.env(), stdout=log, stderr=subprocess.STDOUT,
                              timeout=args.timeout)
    if proc.returncode != 0 or not out.exists():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"e2e_bench of tree {tree.name} exited with {proc.returncode}:\n{tail}")
    rows = []
    for row in json.loads(out.read_text())["runs"]:
        row = {"tree": tree.name, **row, "run": run}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="a pyrmq source tree to run (repeatable; ratios against the first; default: this tree)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds of sending before each run")
    ap.add_argument("--variants", default="default",
                    help="e2e_bench producer variants (default: the producer's defaults only)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one e2e_bench may take")
    ap.add_argument("--out", default="", help="JSON path (default bench/results/e2e_trees.json)")
    args = ap.parse_args(argv)

    trees, described = checked_trees(args.tree)

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="e2e-trees-") as scratch:
        for run, tree in interleaved(args.runs, trees):
            results.extend(run_one(tree, run, args, extra, Path(scratch)))

    rows = median_rows(results, ("tree", "variant"))
    first = {r["variant"]: r for r in rows if r["tree"] == trees[0].name}
    goals = []
    for r in rows:
        base = first.get(r["variant"], {})
        r["x_msg_s"] = ratio(r.get("msg_per_s"), base.get("msg_per_s"))
        r["x_broker_cpu"] = ratio(r.get("broker_cpu_us_per_msg"), base.get("broker_cpu_us_per_msg"))
        if r["tree"] != trees[0].name:
            goals.append({
                "tree": r["tree"], "variant": r["variant"],
                "msg_ratio": r["x_msg_s"], "msg_ratio_goal": GOAL_MSG_RATIO,
                "msg_ratio_met": r["x_msg_s"] >= GOAL_MSG_RATIO,
                "broker_cpu_us_per_msg": r.get("broker_cpu_us_per_msg"), "broker_cpu_goal_us": GOAL_BROKER_CPU_US,
                "broker_cpu_met": (r.get("broker_cpu_us_per_msg") or float("inf")) <= GOAL_BROKER_CPU_US,
            })
    columns = ["tree", "variant", "runs"] + [c for c in COLUMNS if all(c in r for r in rows)]
    print()
    print_table(
        f"e2e_bench per tree: {args.duration:.0f} s runs, medians of {args.runs}; ratios against {trees[0].name}",
        columns, [[r[c] for c in columns] for r in rows],
    )
    for g in goals:
        print(f"goal {g['tree']}/{g['variant']}: msg/s x{g['msg_ratio']} (>= {GOAL_MSG_RATIO}: "
              f"{'met' if g['msg_ratio_met'] else 'not met'}), broker {g['broker_cpu_us_per_msg']} us/msg "
              f"(<= {GOAL_BROKER_CPU_US}: {'met' if g['broker_cpu_met'] else 'not met'})")
    out = Path(args.out) if args.out else None
    write_json(out.stem if out else "e2e_trees",
               {"args": {**vars(args), "e2e_args": extra}, "trees": described, "runs": results, "medians": rows,
                "goals": goals},
               directory=out.parent if out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
