"""Confirm-gate benchmark: what controller mode's read-side confirm offset costs the store, against classic mode.

Read table: ``MessageStore.get_message`` (32 messages a call, no filter) in CPU microseconds per returned message
over ``--mib`` of 1 KiB messages in 8 queues, on one store: classic (no gate, ``confirmed_only`` ignored), gated
with everything confirmed (one comparison per batch) and gated with only the first half confirmed (every batch of
the second half is cut by a bisection, and answers nothing).

Put table: ``put_messages`` of single messages, CPU microseconds per message, classic against a gated store whose
consumer wakeups are held back (controller mode, a confirm offset that never moves) and one whose set confirms at
once (the master alone).

Usage: ``python -m bench.confirm_gate_bench [--mib 16] [--runs 3]``. Writes ``bench/results/confirm_gate_bench.json``.
Never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from bench.report import median_of, print_table, write_json
from broker.config import MessageStoreConfig
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft

MiB = 1024 * 1024
BODY = 1024
QUEUES = 8


def _read_all(store: MessageStore, confirmed_only: bool) -> tuple[int, float]:
    n, c0 = 0, time.process_time()
    for qid in range(QUEUES):
        off, end = 0, store.max_offset_in_queue("BenchTopic", qid)
        while off < end:
            res = store.get_message("g", "BenchTopic", qid, off, 32, confirmed_only=confirmed_only)
            if not res.message_count:
                break
            n += res.message_count
            off = res.next_begin_offset
    return n, time.process_time() - c0


async def read_sample(root: Path, mib: int, repeats: int = 5) -> dict:
    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * MiB))
    await store.start()
    drafts = [MessageDraft(body=b"b" * BODY, properties={"UNIQ_KEY": f"{i:032X}"}) for i in range(32)]
    q = 0
    while store.max_phy_offset < mib * MiB:
        await store.put_messages("BenchTopic", q % QUEUES, drafts)
        q += 1
    out = {}
    runs = [_read_all(store, True) for _ in range(repeats)]
    out["classic_us_per_msg"] = median_of([c / n * 1e6 for n, c in runs])
    gate = store.enable_confirm_gate(store.max_phy_offset)
    runs = [_read_all(store, True) for _ in range(repeats)]
    out["gated_all_visible_us_per_msg"] = median_of([c / n * 1e6 for n, c in runs])
    gate.limit = store.max_phy_offset // 2
    runs = [_read_all(store, True) for _ in range(repeats)]
    out["gated_half_visible_us_per_msg"] = median_of([c / n * 1e6 for n, c in runs])
    out["gated_half_visible_messages"] = runs[0][0]
    await store.stop()
    return out


async def put_sample(root: Path, mode: str, count: int) -> float:
    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * MiB))
    await store.start()
    if mode != "classic":
        gate = store.enable_confirm_gate(0)
        gate.confirm = (lambda: 0) if mode == "gated_held" else (lambda: store.max_phy_offset)
    store.add_dispatch_listener(lambda t, q, m: None, confirmed=True)  # a consumer wakeup listener, as the broker's
    drafts = [MessageDraft(body=b"b" * BODY, properties={"UNIQ_KEY": "0" * 32})]
    c0 = time.process_time()
    for i in range(count):
        await store.put_messages("BenchTopic", i % QUEUES, drafts)
    spent = time.process_time() - c0
    await store.stop()
    return spent / count * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.confirm_gate_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=16, help="MiB of messages for the read table")
    ap.add_argument("--puts", type=int, default=20_000, help="single-message puts per put sample")
    ap.add_argument("--runs", type=int, default=3, help="samples (median reported)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="confirm-gate-bench-"))
    reads: list[dict] = []
    puts: dict[str, list[float]] = {"classic": [], "gated_held": [], "gated_confirming": []}
    try:
        for run in range(args.runs):
            reads.append(asyncio.run(read_sample(base / f"r{run}", args.mib)))
            shutil.rmtree(base / f"r{run}", ignore_errors=True)
            for mode in puts:
                puts[mode].append(asyncio.run(put_sample(base / f"p{run}{mode}", mode, args.puts)))
                shutil.rmtree(base / f"p{run}{mode}", ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    read = {k: median_of([r[k] for r in reads]) for k in reads[0]}
    print_table(f"get_message, {BODY} B messages, 32 a call, CPU us per returned message, median of {args.runs}",
                ["classic", "gated, all visible", "gated, half visible"],
                [[read["classic_us_per_msg"], read["gated_all_visible_us_per_msg"],
                  read["gated_half_visible_us_per_msg"]]])
    put = {k: median_of(v) for k, v in puts.items()}
    print_table(f"put_messages of 1 message, CPU us per message, median of {args.runs} x {args.puts}",
                ["classic", "gated, wakeups held", "gated, confirming at once"],
                [[put["classic"], put["gated_held"], put["gated_confirming"]]])
    write_json("confirm_gate_bench", {"params": vars(args), "body_bytes": BODY, "get": read | {"samples": reads},
                                      "put_us_per_msg": put | {"samples": puts}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
