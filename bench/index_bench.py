"""The message index's cost: store CPU per message with the index on and off (one run, interleaved), and lookups
in a full-size index file.

- put: a store in this process takes ``--warmup`` messages off the clock, then ``--messages`` 1 KiB messages with
  KEYS and UNIQ_KEY in batches of 32, then waits until the index reached the end; the CPU time of the whole
  process over the messages, index on vs off,
  alternated ``--rounds`` times (medians). Goal of issue 24: on/off <= 1.2.
- instructions (``--instructions``, where valgrind is installed): the same put run under ``valgrind --tool=cachegrind``
  for two message counts, index on and off; instructions per message are the difference over the extra messages
  (start-up cancels out). Unlike CPU time this does not move with the other load on the machine.
- lookup: one IndexFile of RocketMQ's default size (5,000,000 slots) filled with ``--entries`` entries of
  distinct keys, then random lookups of present keys: p50 / p99 in microseconds, and the disk the file takes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cpu import cpu_s
from bench.report import median_of, print_table, write_json
from broker.config import MessageStoreConfig
from broker.store import index_keys
from broker.store.index_file import IndexFile
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft


async def put_run(root: Path, messages: int, index: bool, warmup: int = 0) -> float:
    """CPU µs per message of putting ``messages`` and indexing them (when on), after ``warmup`` messages put and
    indexed off the clock: the first keys of an index file touch fresh pages of its 20 MB slot table (a page fault
    and a block reservation each, kernel time), which a broker pays once per file, not per message."""
    config = MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=256 << 20,
                                message_index_enable=index)
    store = MessageStore(config)
    await store.start()
    body = b"x" * 1024

    async def put(first: int, last: int) -> None:
        for at in range(first, last, 32):
            batch = [MessageDraft(body, {"KEYS": f"order-{i} customer-{i % 1000}", "UNIQ_KEY": f"{i:032X}"},
                                  born_timestamp=1) for i in range(at, min(at + 32, last))]
            await store.put_messages("Orders", at // 32 % 4, batch)
            await asyncio.sleep(0)  # as a broker's loop turns between requests: the index task runs alongside
        if index:
            while store.index.position < store.max_phy_offset:
                await asyncio.sleep(0.005)

    try:
        await put(0, warmup)
        start = cpu_s()
        await put(warmup, warmup + messages)
        return (cpu_s() - start) / messages * 1e6
    finally:
        await store.stop()


def _one_run(args) -> None:
    """The child of ``--instructions``: one put run, nothing printed."""
    asyncio.run(put_run(Path(args.root), args.one_run, args.index == "on", WARMUP_INSTRUCTIONS))


WARMUP_INSTRUCTIONS = 1_000  # cachegrind counts no kernel work: a short warm-up suffices there


def instructions(messages: tuple[int, int]) -> dict[str, float]:
    """Instructions per message of the put path with the index off and on (cachegrind, see the docstring)."""
    counts: dict[tuple[str, int], int] = {}
    with tempfile.TemporaryDirectory(prefix="pyrmq-index-ir-") as tmp:
        for index in ("off", "on"):
            for n in messages:
                proc = subprocess.run(
                    ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                     sys.executable, "-m", "bench.index_bench", "--one-run", str(n), "--index", index,
                     "--root", str(Path(tmp) / f"{index}-{n}")],
                    capture_output=True, text=True, check=True)
                found = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
                if found is None:
                    raise RuntimeError(f"no instruction count in valgrind's output:\n{proc.stderr[-2000:]}")
                counts[(index, n)] = int(found.group(1).replace(",", ""))
    low, high = messages
    off = (counts[("off", high)] - counts[("off", low)]) / (high - low)
    on = (counts[("on", high)] - counts[("on", low)]) / (high - low)
    return {"instructions_per_msg_off": round(off), "instructions_per_msg_on": round(on),
            "instructions_on_off_ratio": round(on / off, 3)}


def lookup_run(path: Path, entries: int, lookups: int) -> tuple[float, float, float, float]:
    """(fill µs per entry, lookup p50 µs, lookup p99 µs, MiB on disk)."""
    f = IndexFile(path, 5_000_000, max(entries + 1, 2), create=True)
    t0 = time.perf_counter()
    for i in range(entries):
        f.put(f"Orders#key-{i}", i * 1000, 1_700_000_000_000 + i)
    fill_us = (time.perf_counter() - t0) / max(entries, 1) * 1e6
    rng = random.Random(7)
    samples = []
    for _ in range(lookups):
        i = rng.randrange(entries)
        t = time.perf_counter()
        hits = f.lookup(f"Orders#key-{i}", 32, 0, 2**62)
        samples.append((time.perf_counter() - t) * 1e6)
        assert i * 1000 in hits
    f.flush()
    disk = os.stat(path).st_blocks * 512 / 2**20
    f.close()
    samples.sort()
    return fill_us, statistics.median(samples), samples[int(len(samples) * 0.99)], disk


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20_000, help="messages put and indexed before the clock starts")
    ap.add_argument("--entries", type=int, default=2_000_000)
    ap.add_argument("--lookups", type=int, default=20_000)
    ap.add_argument("--instructions", action="store_true", help="also count instructions under valgrind")
    ap.add_argument("--one-run", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--index", default="on", help=argparse.SUPPRESS)
    ap.add_argument("--root", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_run:
        _one_run(args)
        return
    on, off = [], []
    with tempfile.TemporaryDirectory(prefix="pyrmq-index-bench-") as tmp:
        for r in range(args.rounds):
            for index in (False, True) if r % 2 == 0 else (True, False):
                us = asyncio.run(put_run(Path(tmp) / f"{r}-{index}", args.messages, index, args.warmup))
                (on if index else off).append(us)
        fill_us, p50, p99, disk = lookup_run(Path(tmp) / "lookup", args.entries, args.lookups)
    ratio = median_of(on) / median_of(off)
    counted = instructions((2_000, 6_000)) if args.instructions else {}
    if counted:
        print_table("message index: instructions per message (cachegrind, 4,000 messages past start-up)",
                    ["index off", "index on", "on/off"],
                    [[counted["instructions_per_msg_off"], counted["instructions_per_msg_on"],
                      counted["instructions_on_off_ratio"]]])
    path = "C (index_native)" if index_keys.native is not None else "pure Python"
    print_table(f"message index: store CPU per message (1 KiB, batches of 32, 2 keys + UNIQ_KEY; {path})",
                ["index", "CPU µs/msg (median)", "runs"],
                [["off", median_of(off), len(off)], ["on", median_of(on), len(on)], ["on/off", ratio, ""]])
    print_table(f"message index: lookups in one file of {args.entries:,} entries (5,000,000 slots)",
                ["fill µs/entry", "lookup p50 µs", "lookup p99 µs", "MiB on disk"], [[fill_us, p50, p99, disk]])
    write_json("index_bench", {
        "native": index_keys.native is not None, "messages": args.messages, "warmup_messages": args.warmup,
        "put_cpu_us_per_msg_off": off, "put_cpu_us_per_msg_on": on, "on_off_ratio": ratio,
        "entries": args.entries, "fill_us_per_entry": fill_us, "lookup_p50_us": p50, "lookup_p99_us": p99,
        "disk_mib": disk, **counted,
    })


if __name__ == "__main__":
    main()
