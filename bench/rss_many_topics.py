"""Where a master's resident memory goes with many topics: ``/proc/<pid>/smaps`` grouped by mapping.

The ``topics`` sweep of ``bench.scaling`` measured the master's RSS at 0.5-1.2 GiB with 1,000 topics x 8 queues
against about 0.1 GiB with one. This bench runs a nameserver and an ASYNC_MASTER (no slave: the slave's
metadata wait would make creating 1,000 topics slow, and the master's memory is the question), the producer and
push-consumer applications of ``bench.deploy_clients`` (64 senders x 1 KiB over ``--topics`` topics of 8 queues,
a consumer subscribed to all), for ``--seconds``; then reads the master's smaps and reports its resident bytes
by mapping: the commitlog, the consume-queue files, the index files, shared libraries, the Python heap and other
anonymous memory, and smaps_rollup's split into anonymous, file-backed clean and dirty pages. File-backed clean
pages are page cache the kernel takes back under memory pressure; anonymous pages are the process's own.

``--senders-first`` starts the senders before the consumer, as ``bench.scaling`` does: with 1,000 topics the
consumer takes minutes to start and the broker writes (and maps) that much more before the reading.

Per tree (``--tree NAME=PATH``, repeatable, ``bench.trees``) and topic count. Writes
``bench/results/rss_many_topics.json``. Never passes or fails.

Usage::

    python -m bench.rss_many_topics --topics 1 --topics 1000 --seconds 8
    python -m bench.rss_many_topics --tree old=/tmp/old --tree this=. --topics 1000
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.deploy_bench import BROKER_NAME, BROKER_READY, NAMESRV_READY, ClientProc, Server, tree_broker_keys  # noqa: E402
from bench.report import print_table, write_json  # noqa: E402
from bench.trees import checked_trees  # noqa: E402
from harness.procs import free_port  # noqa: E402

MIB = 1 << 20
GROUPS = ("commitlog", "consumequeue", "index", "libraries", "heap", "anonymous", "other")


def group_of(path: str) -> str:
    if "/commitlog/" in path:
        return "commitlog"
    if "/consumequeue/" in path:
        return "consumequeue"
    if "/index/" in path:
        return "index"
    if path.endswith(".so") or ".so." in path or path.endswith("python3") or "/bin/python" in path:
        return "libraries"
    if path == "[heap]":
        return "heap"
    if not path or path.startswith("[anon"):
        return "anonymous"
    return "other"


def smaps_by_group(pid: int) -> tuple[dict[str, int], int]:
    """Resident bytes per mapping group, and the number of consume-queue mappings."""
    out: collections.Counter[str] = collections.Counter()
    group, cq_maps = "other", 0
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            parts = line.split()
            if "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's header line
                group = group_of(parts[5] if len(parts) > 5 else "")
                cq_maps += group == "consumequeue"
            elif parts[0] == "Rss:":
                out[group] += int(parts[1]) * 1024
    return {g: out.get(g, 0) for g in GROUPS}, cq_maps


def rollup(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        lines = fh.read().splitlines()[1:]
    return {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines}


async def run_point(tree, topics: int, seconds: float, root: Path, *, senders_first: bool = False) -> dict:
    work = root / f"{tree.name}-{topics}"
    servers: list[Server] = []
    clients: list[ClientProc] = []
    try:
        ns = Server(tree, "namesrv", work / "namesrv", "namesrv",
                    lambda: {"listenPort": free_port(), "metricsPromExporterPort": free_port()}, NAMESRV_READY)
        servers.append(await ns.start())
        ns_addr = f"127.0.0.1:{ns.conf['listenPort']}"
        extra = tree_broker_keys(tree)
        master = Server(tree, "broker", work / "master", "master", lambda: {
            "brokerName": BROKER_NAME, "brokerId": 0, "brokerRole": "ASYNC_MASTER", "namesrvAddr": ns_addr,
            "brokerIP1": "127.0.0.1", "listenPort": free_port(), "haListenPort": free_port(),
            "metricsPromExporterPort": free_port(), "storePathRootDir": str(work / "master" / "store"),
            **{key: value() for key, value in extra.items()}}, BROKER_READY)
        servers.append(await master.start())
        boot_rss = rollup(master.pid)["Rss"]
        args = ["--namesrv", ns_addr, "--topic", f"Rss_{topics}", "--topics", str(topics)]
        producer = ClientProc(tree, work, "producer", *args, "--group", "RssProducer", "--senders", "64")
        clients.append(producer)
        await producer.start(timeout_s=90 + topics / 5)
        consumer = ClientProc(tree, work, "consumer", *args, "--group", "RssConsumer")
        clients.append(consumer)
        before = {}
        if senders_first:  # as bench.scaling: the senders run while the consumer starts
            producer.send("start")
        started = time.monotonic()
        await consumer.start(timeout_s=90 + topics / 5)
        if senders_first:
            producer.send("mark")
            before = {"consumer_start_s": round(time.monotonic() - started, 1),
                      "sent_before_window": (await producer.read())["sent"]}
        else:
            producer.send("start")
        await asyncio.sleep(seconds)
        producer.send("mark")
        consumer.send("mark")
        sent, received = (await producer.read())["sent"], (await consumer.read())["received"]
        groups, cq_maps = smaps_by_group(master.pid)
        roll = rollup(master.pid)
        return {
            "tree": tree.name, "topics": topics, "queues": topics * 8, "seconds": seconds,
            "senders_first": senders_first, **before,
            "sent": sent, "received": received, "boot_rss_mib": round(boot_rss / MIB, 1),
            "rss_mib": round(roll["Rss"] / MIB, 1),
            "anonymous_mib": round(roll["Anonymous"] / MIB, 1),
            "file_clean_mib": round((roll["Shared_Clean"] + roll["Private_Clean"]) / MIB, 1),
            "dirty_mib": round((roll["Shared_Dirty"] + roll["Private_Dirty"]) / MIB, 1),
            "by_mapping_mib": {g: round(v / MIB, 1) for g, v in groups.items()},
            "consume_queue_mappings": cq_maps,
            "consume_queue_kib_per_mapping": round(groups["consumequeue"] / cq_maps / 1024, 1) if cq_maps else 0.0,
        }
    finally:
        for c in clients:
            await c.stop()
        for s in reversed(servers):
            s.stop()


async def main_async(args) -> None:
    trees, described = checked_trees(args.tree)
    root = Path(tempfile.mkdtemp(prefix="rss_many_topics_"))
    points = []
    try:
        for tree in trees:
            for topics in args.topics or [1, 1000]:
                started = time.monotonic()
                point = await run_point(tree, topics, args.seconds, root, senders_first=args.senders_first)
                point["elapsed_s"] = round(time.monotonic() - started, 1)
                points.append(point)
                print(point, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    columns = ["tree", "topics", "sent", "received", "rss_mib", "anonymous_mib", "file_clean_mib", "dirty_mib",
               *(f"map_{g}_mib" for g in GROUPS), "cq_maps", "cq_kib_per_map"]
    rows = [[p["tree"], p["topics"], p["sent"], p["received"], p["rss_mib"], p["anonymous_mib"],
             p["file_clean_mib"], p["dirty_mib"], *p["by_mapping_mib"].values(), p["consume_queue_mappings"],
             p["consume_queue_kib_per_mapping"]] for p in points]
    print_table("master resident memory by mapping (MiB)", columns, rows)
    write_json("rss_many_topics" + ("_senders_first" if args.senders_first else ""), {"args": vars(args), "trees": described, "note": args.note, "points": points})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", help="NAME=PATH (repeatable); default: this checkout")
    ap.add_argument("--topics", action="append", type=int, help="topic counts (repeatable; default 1 and 1000)")
    ap.add_argument("--seconds", type=float, default=8.0, help="how long the senders run before the reading")
    ap.add_argument("--senders-first", action="store_true",
                    help="start the senders before the consumer, as bench.scaling does (writes rss_many_topics_senders_first.json)")
    ap.add_argument("--note", default="")
    asyncio.run(main_async(ap.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
