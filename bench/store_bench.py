"""Store benchmark: MessageStore.put_messages throughput with 1 KiB messages.

Variants: batches of 1, 16 and 128 messages under ASYNC_FLUSH (one writer) and SYNC_FLUSH (group commit with
enough concurrent writers to share fdatasyncs). Each sample runs on a fresh store directory for ``--duration``
seconds (or until ``--max-mib`` were written), then the store is stopped and deleted. Reported per variant: the
median of ``--runs`` samples of msg/s, MiB/s and CPU microseconds per message (process time of all threads,
``resource.getrusage``), plus the fdatasync count for SYNC_FLUSH.

Usage: ``python -m bench.store_bench [--duration 2] [--runs 3] [--file-mib 256]``. Writes
``bench/results/store_bench.json``. Never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import tempfile
import time
from pathlib import Path

from bench.report import median_of, print_table, write_json
from broker.config import FlushDiskType, MessageStoreConfig
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft, PutStatus

MiB = 1024 * 1024
BODY = 1024


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def one_sample(
    root: Path, flush: FlushDiskType, batch: int, writers: int, duration_s: float, max_mib: int, file_mib: int
) -> dict:
    cfg = MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=file_mib * MiB,
        flush_disk_type=flush,
        warm_mapped_file_enable=True,
    )
    store = MessageStore(cfg)
    await store.start()
    body = b"b" * BODY
    drafts = [
        MessageDraft(body=body, properties={"TAGS": "bench", "UNIQ_KEY": f"{i:032X}"}, born_timestamp=1)
        for i in range(batch)
    ]
    max_bytes = max_mib * MiB
    sent = 0
    bad = 0
    deadline = 0.0

    async def writer(queue_id: int) -> None:
        nonlocal sent, bad
        while time.perf_counter() < deadline and store.max_phy_offset < max_bytes:
            res = await store.put_messages("BenchTopic", queue_id, drafts)
            if res.status is PutStatus.PUT_OK:
                sent += batch
            else:
                bad += 1

    # warm-up: first file, first consume-queue files, and the pre-touch of the next file (its CPU is a
    # once-per-file cost that would otherwise land on the first seconds of the sample)
    for q in range(8):
        await store.put_messages("BenchTopic", q, drafts)
    await store._allocator.wait_idle()
    c0, t0 = cpu_s(), time.perf_counter()
    deadline = t0 + duration_s
    syncs0 = store._group_commit.syncs if store._group_commit else 0
    await asyncio.gather(*(writer(i % 8) for i in range(writers)))
    elapsed = time.perf_counter() - t0
    cpu = cpu_s() - c0
    syncs = (store._group_commit.syncs - syncs0) if store._group_commit else 0
    await store.stop()
    return {
        "msgs": sent,
        "seconds": elapsed,
        "msg_per_s": sent / elapsed,
        "mib_per_s": sent * BODY / MiB / elapsed,
        "cpu_us_per_msg": cpu / max(sent, 1) * 1e6,
        "fdatasyncs": syncs,
        "refused_batches": bad,
    }


VARIANTS = [
    ("ASYNC_FLUSH", FlushDiskType.ASYNC_FLUSH, 1, 1),
    ("ASYNC_FLUSH", FlushDiskType.ASYNC_FLUSH, 16, 1),
    ("ASYNC_FLUSH", FlushDiskType.ASYNC_FLUSH, 128, 1),
    ("SYNC_FLUSH", FlushDiskType.SYNC_FLUSH, 1, 256),
    ("SYNC_FLUSH", FlushDiskType.SYNC_FLUSH, 16, 64),
    ("SYNC_FLUSH", FlushDiskType.SYNC_FLUSH, 128, 16),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per sample")
    ap.add_argument("--runs", type=int, default=3, help="samples per variant (median reported)")
    ap.add_argument("--max-mib", type=int, default=1536, help="stop a sample after this many MiB")
    ap.add_argument("--file-mib", type=int, default=256, help="mappedFileSizeCommitLog in MiB")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = ap.parse_args(argv)

    base = Path(args.dir or tempfile.mkdtemp(prefix="store-bench-"))
    samples: dict[int, list[dict]] = {i: [] for i in range(len(VARIANTS))}
    try:
        for run in range(args.runs):  # interleave variants so drift hits all of them alike
            for i, (_, flush, batch, writers) in enumerate(VARIANTS):
                root = base / f"r{run}v{i}"
                samples[i].append(
                    asyncio.run(one_sample(root, flush, batch, writers, args.duration, args.max_mib, args.file_mib))
                )
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)

    rows, results = [], []
    for i, (name, _, batch, writers) in enumerate(VARIANTS):
        s = samples[i]
        row = {
            "flush": name,
            "batch": batch,
            "writers": writers,
            "msg_per_s": median_of([x["msg_per_s"] for x in s]),
            "msg_per_s_min": min(x["msg_per_s"] for x in s),
            "msg_per_s_max": max(x["msg_per_s"] for x in s),
            "mib_per_s": median_of([x["mib_per_s"] for x in s]),
            "cpu_us_per_msg": median_of([x["cpu_us_per_msg"] for x in s]),
            "fdatasyncs_per_s": median_of([x["fdatasyncs"] / x["seconds"] for x in s]),
            "samples": s,
        }
        results.append(row)
        rows.append(
            [
                name,
                batch,
                writers,
                row["msg_per_s"],
                row["msg_per_s_min"],
                row["msg_per_s_max"],
                row["mib_per_s"],
                row["cpu_us_per_msg"],
                row["fdatasyncs_per_s"],
            ]
        )
    print_table(
        f"store put_messages, {BODY} B messages, median of {args.runs} x {args.duration:.0f}s",
        ["flush", "batch", "writers", "msg/s", "min", "max", "MiB/s", "CPU us/msg", "fdatasync/s"],
        rows,
    )
    write_json("store_bench", {"params": vars(args), "body_bytes": BODY, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
