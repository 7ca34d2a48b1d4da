"""Fuzz every decoder that reads the network or the disk, and report executions and findings per decoder.

The targets are ``harness.fuzz_targets`` (the same ones the Hypothesis tests drive): remoting frames and headers,
header fields, fastjson bodies, HA frames/hello/reports, stored records and batches, config files. A finding is
an input that ends in anything but the decoder's documented error type (spec/reliability.md §7); hangs and
crashes of the fuzzing process count too. The target is 1,000,000 executions per decoder with no finding.

Each target runs in a child process of its own, one after the other (never two at once: they share the cores;
run the whole thing under ``nice -n 19`` on a shared machine):

- ``--engine atheris`` (the default when ``import atheris`` works): libFuzzer with coverage guidance, the
  target's modules instrumented, value profiling on (it finds magic numbers), a seed corpus from the target;
  reports libFuzzer's coverage (``cov``: edges, ``ft``: features) and the corpus it grew.
- ``--engine mutate``: a plain mutation fuzzer (bit flips, interesting integers, inserts, deletes, splices of
  the seeds) for machines without atheris; no coverage feedback, deterministic for a ``--seed``.

``python -m bench.fuzz --runs 1000000`` is the full run; ``python -m bench`` runs 20,000 per target.
Writes ``bench/results/fuzz.json``; findings (with the first input, hex) are printed under the table.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import print_table, write_json

DEFAULT_RUNS = 20_000
MAX_LEN = 4096
STATS_EVERY_S = 2.0
INTERESTING_32 = [0, 1, 2, 4, 7, 8, 12, 16, 20, 22, 88, 91, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF,
                  0x10000, 0xFFFFFF, 0x1000000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xDAA320A7, 0xCBD43194]
# Packages atheris instruments for coverage: every module a target decodes with (a test checks that each
# target's ``modules`` lie inside them). Nothing may import them before the instrumented import.
INSTRUMENT = ("remoting", "common", "broker.config", "namesrv.config", "broker.store.dispatch_scan")
_COV = re.compile(r"cov: (\d+) ft: (\d+) corp: (\d+)/")


# child: one target ------------------------------------------------------------------------------------------
class Recorder:
    """Counts executions and distinct findings of one target; writes them to ``out`` now and then, so the
    figures survive however the fuzzing process ends."""

    def __init__(self, name: str, out: Path, runs: int) -> None:
        self.name = name
        self.out = out
        self.runs = runs
        self.executions = 0
        self.findings: dict[str, dict[str, Any]] = {}
        self.slowest_s = 0.0
        self.started = time.monotonic()
        self._next_write = self.started + STATS_EVERY_S

    def record(self, target, data: bytes) -> None:
        from harness.fuzz_targets import run_one

        t0 = time.perf_counter()
        finding = run_one(target, data)
        elapsed = time.perf_counter() - t0
        self.executions += 1
        if elapsed > self.slowest_s:
            self.slowest_s = elapsed
            self.out.with_suffix(".slowest").write_bytes(data)  # re-timed by the parent, quietly
        if finding is not None:
            key = " ".join(finding.signature[1:])
            entry = self.findings.setdefault(
                key, {"error": finding.error, "where": finding.where, "message": finding.message, "count": 0,
                      "input_hex": finding.data[:512].hex()})
            entry["count"] += 1
        now = time.monotonic()
        if now >= self._next_write or self.executions >= self.runs:
            self.write()
            self._next_write = now + STATS_EVERY_S

    def write(self) -> None:
        doc = {"target": self.name, "executions": self.executions, "elapsed_s": time.monotonic() - self.started,
               "slowest_exec_s": self.slowest_s, "findings": self.findings}
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.out)


def _child_atheris(name: str, runs: int, out: Path, corpus: Path, artifacts: Path, max_seconds: int) -> None:
    import atheris

    with atheris.instrument_imports(include=list(INSTRUMENT)):
        from harness import fuzz_targets

    target = fuzz_targets.TARGETS[name]
    recorder = Recorder(name, out, runs)
    for i, seed in enumerate(target.seeds()):
        (corpus / f"seed-{i}").write_bytes(seed)

    def one_input(data: bytes) -> None:
        recorder.record(target, data)

    argv = [sys.argv[0], str(corpus), f"-runs={runs}", f"-max_len={target.max_len}", "-timeout=10", "-rss_limit_mb=2048",
            "-use_value_profile=1", "-print_final_stats=1", f"-artifact_prefix={artifacts}/"]
    if max_seconds:
        argv.append(f"-max_total_time={max_seconds}")
    atheris.Setup(argv, one_input)
    try:
        atheris.Fuzz()
    finally:
        recorder.write()


def mutate(data: bytes, rng: random.Random, pool: list[bytes], max_len: int = MAX_LEN) -> bytes:
    """One to eight random edits of ``data`` (AFL's havoc stage, simplified)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(7)
        if op == 0 and buf:  # flip a bit
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and len(buf) >= 4:  # an interesting 32-bit integer, big-endian as the wire has it
            i = rng.randrange(len(buf) - 3)
            buf[i:i + 4] = struct.pack(">I", rng.choice(INTERESTING_32))
        elif op == 2 and len(buf) >= 2:  # an interesting 16-bit or 8-bit value
            i = rng.randrange(len(buf) - 1)
            buf[i:i + 2] = struct.pack(">H", rng.choice(INTERESTING_32) & 0xFFFF)
        elif op == 3:  # insert random bytes
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and buf:  # delete a range
            i = rng.randrange(len(buf))
            del buf[i:i + rng.randint(1, 32)]
        elif op == 5 and buf:  # duplicate a range
            i = rng.randrange(len(buf))
            buf[i:i] = buf[i:i + rng.randint(1, 64)]
        elif op == 6 and pool:  # splice with another input
            other = rng.choice(pool)
            i = rng.randrange(len(buf) + 1)
            j = rng.randrange(len(other) + 1)
            buf = buf[:i] + other[j:]
    return bytes(buf[:max_len])


def _child_mutate(name: str, runs: int, out: Path, seed: int, max_seconds: int) -> None:
    from harness.fuzz_targets import TARGETS

    target = TARGETS[name]
    rng = random.Random(seed)
    pool = target.seeds()
    recorder = Recorder(name, out, runs)
    deadline = time.monotonic() + max_seconds if max_seconds else float("inf")
    for i in range(runs):
        if i % 16 == 0:
            data = rng.randbytes(rng.randint(0, 64))  # some inputs from scratch
        else:
            data = mutate(rng.choice(pool), rng, pool, target.max_len)
        recorder.record(target, data)
        if i % 1000 == 0 and time.monotonic() > deadline:
            break
    recorder.write()


# parent -----------------------------------------------------------------------------------------------------
def _engine(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "mutate"
    return "atheris"


def run_target(name: str, runs: int, engine: str, seed: int, max_seconds: int, workdir: Path) -> dict[str, Any]:
    out = workdir / f"{name}.json"
    corpus = workdir / f"corpus-{name}"
    corpus.mkdir(exist_ok=True)
    log_path = workdir / f"{name}.log"
    cmd = [sys.executable, "-m", "bench.fuzz", "--child", name, "--runs", str(runs), "--engine", engine,
           "--seed", str(seed), "--max-seconds", str(max_seconds), "--out", str(out), "--corpus", str(corpus)]
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[1],
                            check=False).returncode
    wall = time.monotonic() - t0
    stats: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"executions": 0, "findings": {}}
    text = log_path.read_text(errors="replace")
    stats.update(target=name, engine=engine, returncode=rc, wall_s=wall)
    slowest = out.with_suffix(".slowest")
    if slowest.exists():  # the slowest execution again, alone: a slow input, or only a busy machine?
        stats["slowest_retimed_ms"] = _retime(name, slowest.read_bytes()) * 1000
        stats["slowest_input_len"] = slowest.stat().st_size
    covs = _COV.findall(text)
    if covs:
        cov, ft, corp = covs[-1]
        stats.update(coverage_edges=int(cov), coverage_features=int(ft), corpus=int(corp))
    if rc != 0:  # the process itself died: a hang (libFuzzer timeout), OOM or crash is a finding as well
        reason = "timeout" if "libFuzzer: timeout" in text else "out of memory" if "out-of-memory" in text else "crash"
        stats["findings"][f"process {reason}"] = {"error": reason, "where": "", "message": text[-2000:], "count": 1,
                                                  "input_hex": ""}
    return stats


def _retime(name: str, data: bytes, repeat: int = 3) -> float:
    from harness.fuzz_targets import TARGETS, run_one

    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run_one(TARGETS[name], data)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="executions per target")
    parser.add_argument("--engine", choices=("auto", "atheris", "mutate"), default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-seconds", type=int, default=0, help="stop a target after this long (0: no limit)")
    parser.add_argument("--name", default="fuzz", help="results file name (bench/results/<name>.json)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        out = Path(args.out)
        if args.engine == "atheris":
            _child_atheris(args.child, args.runs, out, Path(args.corpus), out.parent, args.max_seconds)
        else:
            _child_mutate(args.child, args.runs, out, args.seed, args.max_seconds)
        return 0

    from harness.fuzz_targets import TARGETS  # only here: an atheris child must import the decoders instrumented

    names = [n.strip() for n in args.targets.split(",") if n.strip()] or list(TARGETS)
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
    engine = _engine(args.engine)
    results = []
    with tempfile.TemporaryDirectory(prefix="pyrmq-fuzz-") as tmp:
        for name in names:
            print(f"fuzzing {name}: {args.runs:,} executions with {engine}", flush=True)
            results.append(run_target(name, args.runs, engine, args.seed, args.max_seconds, Path(tmp)))
    rows = []
    for r in results:
        execs = r.get("executions", 0)
        elapsed = r.get("elapsed_s") or r["wall_s"]
        rows.append([r["target"], r["engine"], execs, execs / elapsed if elapsed else 0.0,
                     len(r["findings"]), sum(f["count"] for f in r["findings"].values()),
                     r.get("coverage_edges", "-"), r.get("coverage_features", "-"), r.get("corpus", "-"),
                     r.get("slowest_exec_s", 0.0) * 1000, r.get("slowest_retimed_ms", float("nan"))])
    print_table("input fuzzing per decoder (a finding = an exception other than the documented error type)",
                ["target", "engine", "executions", "exec/s", "findings", "finding hits", "cov", "ft", "corpus",
                 "slowest ms", "slowest again ms"], rows)
    for r in results:
        for key, f in r["findings"].items():
            print(f"FINDING {r['target']}: {key} x{f['count']}: {f['message'][:300]}\n  input: {f['input_hex'][:200]}")
    write_json(args.name, {"runs_per_target": args.runs, "engine": engine, "targets": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
