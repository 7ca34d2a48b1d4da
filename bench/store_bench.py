"""Store benchmark: MessageStore.put_messages throughput with 1 KiB messages.

Variants: batches of 1, 16 and 128 messages under ASYNC_FLUSH (one writer) and SYNC_FLUSH (group commit with
enough concurrent writers to share fdatasyncs). Each sample runs on a fresh store directory for ``--duration``
seconds (or until ``--max-mib`` were written), then the store is stopped and deleted. Reported per variant: the
median of ``--runs`` samples of msg/s, MiB/s and CPU microseconds per message (process time of all threads,
``resource.getrusage``), plus the fdatasync count for SYNC_FLUSH.

A get table measures ``get_message`` (the pull path's store read, 32 messages a call, no tag filter and a
"tagA" filter) in CPU microseconds per returned message, over two layouts of ``--get-mib``: 32-message batches (a
queue's records contiguous) and single messages round-robin over 8 queues (interleaved), against the former
per-record ``commitlog.read`` loop (``harness.store_reference``, the equivalence test's reference) in the same
run.

A further table measures the SLAVE's dispatch (consume queues built from replicated bytes, the slave's main
CPU cost under replication): CPU microseconds per record of the tail dispatcher over ``--dispatch-mib`` of
replicated records, and, over the same bytes in the same run, the parse alone with the full validator
(``check_record`` + ``property_value``, the dispatcher's former path) against the lean ``dispatch_scan``.

Usage: ``python -m bench.store_bench [--duration 2] [--runs 3] [--file-mib 256] [--dispatch-mib 64]
[--get-mib 16]``. Writes
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
from broker.config import BrokerRole, FlushDiskType, MessageStoreConfig
from broker.store import get as get_path
from broker.store.dispatch_scan import scan
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft, PutStatus
from harness.store_reference import naive_get
from remoting.message_codec import RecordStatus, TagFilter, check_record, property_value

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
    await store.allocator.wait_idle()
    c0, t0 = cpu_s(), time.perf_counter()
    deadline = t0 + duration_s
    syncs0 = store.group_commit.syncs if store.group_commit else 0
    await asyncio.gather(*(writer(i % 8) for i in range(writers)))
    elapsed = time.perf_counter() - t0
    cpu = cpu_s() - c0
    syncs = (store.group_commit.syncs - syncs0) if store.group_commit else 0
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


async def dispatch_sample(root: Path, mib: int) -> dict:
    """Fill a master, copy its commitlog into a SLAVE store in 32 KiB frames (as HA does), time the dispatch."""
    file_size = 64 * MiB
    master = MessageStore(MessageStoreConfig(store_path_root_dir=str(root / "m"), mapped_file_size_commit_log=file_size))
    await master.start()
    body = b"b" * BODY
    drafts = [MessageDraft(body=body, properties={"TAGS": f"tag{i % 4}", "UNIQ_KEY": f"{i:032X}"}) for i in range(100)]
    q = 0
    while master.max_phy_offset < mib * MiB:
        await master.put_messages("BenchTopic", q % 8, drafts)
        q += 1
    records = q * len(drafts)
    frames = []  # 32 KiB frames as HA sends them, copied out so the master can stop first (its threads idle)
    pos, end = master.min_phy_offset, master.max_phy_offset
    while pos < end:
        sl = master.commitlog_slice(pos, 32 * 1024)
        frames.append((pos, bytes(sl.view[: sl.length])))
        pos += sl.length
    await master.stop()
    slave = MessageStore(MessageStoreConfig(store_path_root_dir=str(root / "s"), mapped_file_size_commit_log=file_size,
                                            broker_role=BrokerRole.SLAVE))
    await slave.start()
    # CPU of the event-loop thread only: flush threads' fdatasync/writeback would otherwise be counted
    c0 = time.thread_time()
    for pos, data in frames:  # no await: the tail dispatcher only starts once everything is appended
        slave.append_replicated(pos, data)
    append_cpu = time.thread_time() - c0
    frames.clear()
    c0, t0 = time.thread_time(), time.perf_counter()
    while slave.dispatched_phy_offset < end:
        await asyncio.sleep(0)
    dispatch_cpu, dispatch_s = time.thread_time() - c0, time.perf_counter() - t0
    mf = slave.commitlog.files.files[0]
    mm, limit = mf.mapping, min(mf.wrote_position, end)
    view = memoryview(mm)[:limit]
    n, p, c0 = 0, 0, time.process_time()
    while p < limit:  # the former per-record path
        res = check_record(view, p)
        if res.status is not RecordStatus.VALID:
            break
        property_value(res.info.properties, "TAGS")
        p += res.size
        n += 1
    full_us = (time.process_time() - c0) / max(n, 1) * 1e6
    c0 = time.process_time()
    lean = scan(mm, 0, limit, max_size=8 * MiB, delay_ms=[1000])
    lean_us = (time.process_time() - c0) / max(lean.records, 1) * 1e6
    del view
    await slave.stop()
    return {"records": records, "append_cpu_us_per_record": append_cpu / records * 1e6,
            "dispatch_cpu_us_per_record": dispatch_cpu / records * 1e6, "dispatch_seconds": dispatch_s,
            "parse_full_us_per_record": full_us, "parse_lean_us_per_record": lean_us}


def _store_get(store: MessageStore, *args):
    return get_path.get_message(store.config, store.commitlog, store.consume_queues, *args)


async def get_sample(root: Path, mib: int, repeats: int = 5) -> dict:
    """CPU us per returned message of get_message (and of the former loop) over both layouts."""
    out = {}
    for layout, batch in (("batch32", 32), ("single", 1)):
        store = MessageStore(MessageStoreConfig(store_path_root_dir=str(root / layout),
                                                mapped_file_size_commit_log=64 * MiB))
        await store.start()
        drafts = [MessageDraft(body=b"b" * BODY, properties={"TAGS": f"tag{i % 2}", "UNIQ_KEY": f"{i:032X}"})
                  for i in range(batch)]
        q = 0
        while store.max_phy_offset < mib * MiB:
            await store.put_messages("BenchTopic", q % 8, drafts)
            q += 1
        for filt_name, filt in (("all", None), ("tag0", TagFilter("tag0"))):
            for name, fn in (("new", _store_get), ("old", naive_get)):
                runs = []
                for _ in range(repeats):
                    n, c0 = 0, time.process_time()
                    for qid in range(8):
                        off, end = 0, store.max_offset_in_queue("BenchTopic", qid)
                        while off < end:
                            res = fn(store, "BenchTopic", qid, off, 32, 0, filt)
                            n += len(res.records)
                            off = res.next_begin_offset
                    runs.append((time.process_time() - c0) / max(n, 1) * 1e6)
                out[f"{layout}_{filt_name}_{name}_us_per_msg"] = median_of(runs)
        await store.stop()
    return out


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
    ap.add_argument("--dispatch-mib", type=int, default=64, help="replicated MiB for the dispatch table (0: skip)")
    ap.add_argument("--get-mib", type=int, default=16, help="MiB per layout for the get table (0: skip)")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = ap.parse_args(argv)

    base = Path(args.dir or tempfile.mkdtemp(prefix="store-bench-"))
    samples: dict[int, list[dict]] = {i: [] for i in range(len(VARIANTS))}
    dispatch: list[dict] = []
    gets: list[dict] = []
    try:
        for run in range(args.runs):  # interleave variants so drift hits all of them alike
            if args.get_mib > 0:
                gets.append(asyncio.run(get_sample(base / f"r{run}g", args.get_mib)))
                shutil.rmtree(base / f"r{run}g", ignore_errors=True)
            if args.dispatch_mib > 0:
                dispatch.append(asyncio.run(dispatch_sample(base / f"r{run}d", args.dispatch_mib)))
                shutil.rmtree(base / f"r{run}d", ignore_errors=True)
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
    disp = {}
    if dispatch:
        keys = [k for k in dispatch[0] if k != "records"]
        disp = {k: median_of([d[k] for d in dispatch]) for k in keys} | {"records": dispatch[0]["records"]}
        print_table(
            f"SLAVE dispatch of {args.dispatch_mib} MiB replicated ({disp['records']:,} records), median of {args.runs}",
            ["append us/rec", "dispatch CPU us/rec", "dispatch s", "parse: full us/rec", "parse: lean us/rec"],
            [[disp["append_cpu_us_per_record"], disp["dispatch_cpu_us_per_record"], disp["dispatch_seconds"],
              disp["parse_full_us_per_record"], disp["parse_lean_us_per_record"]]],
        )
    get_rows = {}
    if gets:
        get_rows = {k: median_of([g[k] for g in gets]) for k in gets[0]}
        rows = []
        for layout in ("batch32", "single"):
            for filt in ("all", "tag0"):
                new = get_rows[f"{layout}_{filt}_new_us_per_msg"]
                old = get_rows.get(f"{layout}_{filt}_old_us_per_msg", float("nan"))
                rows.append([layout, filt, f"{new:.2f}", f"{old:.2f}", f"{old / new:.2f}x"])
        print_table(
            f"store get_message, {BODY} B messages, 32 a call, CPU us per returned message, median of {args.runs}",
            ["layout", "filter", "get us/msg", "former loop us/msg", "speed-up"],
            rows,
        )
    write_json("store_bench", {"params": vars(args), "body_bytes": BODY, "results": results,
                               "slave_dispatch": disp | {"samples": dispatch},
                               "get": get_rows | {"samples": gets}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
