"""Replication benchmark: produce throughput without a slave / ASYNC_MASTER / SYNC_MASTER, replication lag, catch-up.

All variants run in one process run, so they are compared as ratios (spec/performance.md Part C, hygiene item 8):
1. produce: W concurrent writers call ``MessageStore.put_messages`` with B x S-byte messages on an in-process
   master; the slave (when any) is a separate process (``python -m broker.ha.slave_main``) on loopback. Variants
   are interleaved run by run; medians are reported with CPU microseconds per message of master and slave.
   Each writer yields to the loop once per put, as a request handler in a real broker does.
2. lag under ASYNC load: for every put, the time from the put to the first slave ack covering its end offset
   (seen on the master; puts still unacked at the end count with their age), and the byte lag (master max -
   highest ack) sampled every 10 ms; p50/p99. Master and slave share the 2 cores, so a slave that keeps up
   also takes CPU from the master: read async/none with that in mind.
3. catch-up: an empty slave process copies N MiB (default 1024) from the master's min offset; MiB/s from its
   connection to the ack of the master's max, against a raw ``os.sendfile`` loopback copy of the same files
   (receiver: recv_into + os.write to a file, like the slave) measured in the same run.

Prints tables and writes ``bench/results/replication_bench.json`` (``bench/report.py``). Never passes or fails.
Usage: ``python -m bench.replication_bench [--duration 3] [--runs 3] [--catchup-mib 1024]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from broker.config import BrokerConfig, BrokerRole, BrokerSettings, MessageStoreConfig  # noqa: E402
from broker.ha.service import HAService  # noqa: E402
from broker.store.message_store import MessageStore  # noqa: E402
from broker.store.types import MessageDraft, PutStatus  # noqa: E402
from bench import report  # noqa: E402
from bench.cpu import cpu_s  # noqa: E402
from harness.procs import free_port  # noqa: E402

MiB = 1024 * 1024
CLUSTER, BROKER = "BenchCluster", "broker-bench"


def settings(root: Path, role: BrokerRole, file_size: int) -> BrokerSettings:
    store = MessageStoreConfig(store_path_root_dir=str(root), broker_role=role, mapped_file_size_commit_log=file_size,
                               mapped_file_size_consume_queue=20 * 300_000, ha_listen_port=free_port(),
                               warm_mapped_file_enable=True, flush_interval_commit_log=500)
    broker = BrokerConfig(broker_cluster_name=CLUSTER, broker_name=BROKER, broker_ip1="127.0.0.1",
                          listen_port=free_port(), metrics_exporter_type="DISABLE")
    return BrokerSettings(broker=broker, store=store)


def spawn_slave(root: Path, master_addr: str, file_size: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker.ha.slave_main", "--root", str(root), "--master", master_addr,
         "--file-size", str(file_size), "--cluster", CLUSTER, "--broker-name", BROKER],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    line = proc.stdout.readline()
    if "HA slave ready" not in line:
        raise RuntimeError(f"slave process did not start: {line}{proc.stdout.read()}")
    return proc


def stop_slave(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def wait_for(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench: {what} not reached within {timeout_s} s")
        await asyncio.sleep(0.01)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


# ------------------------------------------------------------------------------------------------- produce
async def produce(kind: str, tmp: Path, args) -> dict:
    """One sample of one variant: 'none' | 'async' | 'sync'."""
    role = BrokerRole.SYNC_MASTER if kind == "sync" else BrokerRole.ASYNC_MASTER
    root = tmp / f"{kind}-{time.monotonic_ns()}"
    s = settings(root / "m", role, args.file_size)
    store = MessageStore(s.store)
    await store.start()
    ha = HAService(s, store, listen_host="127.0.0.1")
    await ha.start()
    proc = None
    lags_s: list[float] = []
    byte_lags: list[int] = []
    pending: deque[tuple[int, float]] = deque()
    if kind != "none":
        proc = spawn_slave(root / "s", f"127.0.0.1:{ha.ha_port}", args.file_size)
        await wait_for(lambda: ha.master.connected_slaves() == 1, 20, "slave connection")
        if kind == "async":
            def on_ack(offset: int) -> None:
                now = time.perf_counter()
                while pending and pending[0][0] <= offset:
                    lags_s.append(now - pending.popleft()[1])
            ha.master.on_ack_listener = on_ack
    body = os.urandom(args.size)
    drafts = [MessageDraft(body=body, properties={"TAGS": "bench"}) for _ in range(args.batch)]
    stop = asyncio.Event()
    counts = {"msgs": 0, "weak": 0}
    latencies: list[float] = []

    async def writer(n: int) -> None:
        q = n % 8
        while not stop.is_set():
            t0 = time.perf_counter()
            r = await store.put_messages("BenchTopic", q, drafts)
            latencies.append(time.perf_counter() - t0)
            if kind == "async":
                pending.append((r.next_offset, t0))
            if not r.status.stored:
                raise RuntimeError(f"bench: the store refused a put: {r.status.name}: {r.remark}")
            counts["msgs"] += r.msg_count
            if r.status is not PutStatus.PUT_OK:
                counts["weak"] += 1
            # A put that needs no wait (none/ASYNC) never suspends, so without this the writers would own the
            # loop and starve the HA connection until a file roll: in a broker every put is its own request
            # task, and the loop runs other callbacks between requests.
            await asyncio.sleep(0)

    async def sample_byte_lag() -> None:
        while not stop.is_set():
            byte_lags.append(store.max_phy_offset - ha.push2slave_max_offset)
            await asyncio.sleep(0.01)

    slave_cpu0 = cpu_s(proc.pid) if proc else 0.0
    cpu0, t0 = cpu_s(), time.perf_counter()
    tasks = [asyncio.create_task(writer(i)) for i in range(args.writers)]
    if kind == "async":
        tasks.append(asyncio.create_task(sample_byte_lag()))
    await asyncio.sleep(args.duration)
    stop.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    unacked = len(pending)
    if kind == "async":
        # puts the slave has not acked by the end count with their age so far (a lower bound), so a slave that
        # falls behind shows up in the percentiles instead of being left out
        end = time.perf_counter()
        lags_s.extend(end - t for _, t in pending)
    cpu = cpu_s() - cpu0
    slave_cpu = (cpu_s(proc.pid) - slave_cpu0) if proc else 0.0
    msgs = counts["msgs"]
    out = {
        "variant": kind, "msgs": msgs, "seconds": elapsed, "msg_per_s": msgs / elapsed,
        "mib_per_s": msgs * args.size / elapsed / MiB, "weak_puts": counts["weak"],
        "put_p50_ms": pct(latencies, 50) * 1000, "put_p99_ms": pct(latencies, 99) * 1000,
        "master_cpu_us_per_msg": cpu / max(msgs, 1) * 1e6, "slave_cpu_us_per_msg": slave_cpu / max(msgs, 1) * 1e6,
    }
    if kind == "async":
        out.update(lag_p50_ms=pct(lags_s, 50) * 1000, lag_p99_ms=pct(lags_s, 99) * 1000, lag_samples=len(lags_s),
                   unacked_at_end=unacked,
                   byte_lag_p50=pct(byte_lags, 50), byte_lag_p99=pct(byte_lags, 99))
    if proc is not None:
        stop_slave(proc)
    await ha.stop()
    await store.stop()
    shutil.rmtree(root, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------------ catch-up
async def catch_up(tmp: Path, args) -> dict:
    root = tmp / "catchup"
    s = settings(root / "m", BrokerRole.ASYNC_MASTER, args.file_size)
    store = MessageStore(s.store)
    await store.start()
    ha = HAService(s, store, listen_host="127.0.0.1")
    await ha.start()
    target = args.catchup_mib * MiB
    body = os.urandom(16 * 1024)
    drafts = [MessageDraft(body=body) for _ in range(64)]
    t_fill = time.perf_counter()
    while store.max_phy_offset < target:
        r = await store.put_messages("CatchUpTopic", 0, drafts)
        if not r.status.stored:
            raise RuntimeError(f"bench: the master refused the catch-up data: {r.status.name}: {r.remark}")
    fill_s = time.perf_counter() - t_fill
    total = store.max_phy_offset - store.min_phy_offset
    proc = spawn_slave(root / "s", f"127.0.0.1:{ha.ha_port}", args.file_size)
    cpu0, slave_cpu0 = cpu_s(), cpu_s(proc.pid)
    t0 = time.perf_counter()
    await wait_for(lambda: ha.push2slave_max_offset >= store.max_phy_offset, 600, "slave catch-up")
    elapsed = time.perf_counter() - t0
    cpu, slave_cpu = cpu_s() - cpu0, cpu_s(proc.pid) - slave_cpu0
    counters = ha.counters
    stop_slave(proc)
    files = sorted(p for p in s.store.commitlog_dir.iterdir() if p.name.isdigit())
    await ha.stop()
    await store.stop()
    raw = raw_sendfile_copy(files, total, root / "raw-copy")
    shutil.rmtree(root, ignore_errors=True)
    return {
        "bytes": total, "fill_mib_per_s": total / MiB / fill_s, "seconds": elapsed,
        "mib_per_s": total / MiB / elapsed, "master_cpu_s_per_gib": cpu / (total / 1024**3),
        "slave_cpu_s_per_gib": slave_cpu / (total / 1024**3), "sendfile_frames": counters.sendfile_frames,
        "frames": counters.frames_sent, "raw_sendfile_mib_per_s": raw["mib_per_s"],
        "ratio_vs_raw": (total / MiB / elapsed) / raw["mib_per_s"],
    }


def raw_sendfile_copy(files: list[Path], total: int, out: Path) -> dict:
    """os.sendfile of the commitlog files over loopback TCP; the receiver writes what it gets to a file."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = [0]

    def receive() -> None:
        conn, _ = server.accept()
        buf = bytearray(4 * MiB)
        view = memoryview(buf)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    break
                os.write(fd, view[:n])
                received[0] += n
        finally:
            os.close(fd)
            conn.close()

    thread = threading.Thread(target=receive)
    thread.start()
    t0 = time.perf_counter()
    with socket.create_connection(server.getsockname()) as sock:
        left = total
        for path in files:
            if left <= 0:
                break
            fd = os.open(path, os.O_RDONLY)
            try:
                pos, end = 0, min(os.fstat(fd).st_size, left)
                while pos < end:
                    sent = os.sendfile(sock.fileno(), fd, pos, end - pos)
                    if sent == 0:
                        break
                    pos += sent
                left -= end
            finally:
                os.close(fd)
    thread.join()
    elapsed = time.perf_counter() - t0
    server.close()
    with_unlink = out
    with_unlink.unlink(missing_ok=True)
    return {"bytes": received[0], "seconds": elapsed, "mib_per_s": received[0] / MiB / elapsed}


# --------------------------------------------------------------------------------------------------- main
def median_of(samples: list[dict], key: str) -> float:
    return report.median_of([s[key] for s in samples])


async def main_async(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="repl-bench-", dir=args.tmp))
    results: dict = {"config": vars(args).copy(), "produce": {}, "catch_up": None}
    try:
        samples: dict[str, list[dict]] = {"none": [], "async": [], "sync": []}
        for run in range(args.runs):
            for kind in ("none", "async", "sync"):
                r = await produce(kind, tmp, args)
                samples[kind].append(r)
                print(f"run {run + 1} {kind:5s}: {r['msg_per_s']:>9,.0f} msg/s  p50 {r['put_p50_ms']:.2f} ms  "
                      f"master {r['master_cpu_us_per_msg']:.2f} us/msg  slave {r['slave_cpu_us_per_msg']:.2f} us/msg",
                      flush=True)
        for kind, rows in samples.items():
            keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float))]
            results["produce"][kind] = {"median": {k: median_of(rows, k) for k in keys}, "samples": rows}
        med = {k: v["median"]["msg_per_s"] for k, v in results["produce"].items()}
        results["ratios"] = {"async_vs_none": med["async"] / med["none"], "sync_vs_none": med["sync"] / med["none"],
                             "sync_vs_async": med["sync"] / med["async"]}
        if args.catchup_mib > 0:
            results["catch_up"] = await catch_up(tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def print_tables(res: dict) -> None:
    cols = ["variant", "msg/s", "MiB/s", "put p50 ms", "put p99 ms", "master us/msg", "slave us/msg", "weak puts"]
    rows = []
    for kind, row in res["produce"].items():
        m = row["median"]
        rows.append([kind, m["msg_per_s"], m["mib_per_s"], m["put_p50_ms"], m["put_p99_ms"],
                     m["master_cpu_us_per_msg"], m["slave_cpu_us_per_msg"], int(m["weak_puts"])])
    report.print_table("produce (in-process master, slave in its own process; medians)", cols, rows)
    r = res["ratios"]
    print(f"ratios: async/none {r['async_vs_none']:.2f}  sync/none {r['sync_vs_none']:.2f}  "
          f"sync/async {r['sync_vs_async']:.2f}  (goal: sync within 10% of async)")
    a = res["produce"]["async"]["median"]
    print(f"ASYNC replication lag (put -> slave ack seen by master): p50 {a['lag_p50_ms']:.2f} ms, "
          f"p99 {a['lag_p99_ms']:.2f} ms; byte lag p50 {a['byte_lag_p50']:,.0f} B, p99 {a['byte_lag_p99']:,.0f} B")
    c = res.get("catch_up")
    if c:
        report.print_table("catch-up of an empty slave", ["what", "MiB", "seconds", "MiB/s", "master CPU-s/GiB",
                                                          "slave CPU-s/GiB"], [
            ["HA catch-up", c["bytes"] / MiB, c["seconds"], c["mib_per_s"], c["master_cpu_s_per_gib"],
             c["slave_cpu_s_per_gib"]],
            ["raw os.sendfile loopback", c["bytes"] / MiB, c["bytes"] / MiB / c["raw_sendfile_mib_per_s"],
             c["raw_sendfile_mib_per_s"], float("nan"), float("nan")],
        ])
        print(f"catch-up / raw = {c['ratio_vs_raw']:.2f}; {c['sendfile_frames']} of {c['frames']} frames by sendfile")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replication_bench")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per produce sample")
    p.add_argument("--runs", type=int, default=3, help="samples per variant (interleaved)")
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--batch", type=int, default=100, help="messages per put")
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--file-size", type=int, default=64 * MiB, help="mappedFileSizeCommitLog")
    p.add_argument("--catchup-mib", type=int, default=1024, help="0 skips the catch-up measurement")
    p.add_argument("--tmp", default=None, help="directory for the stores (default: system temp)")
    p.add_argument("--results-dir", default=None, help="where the JSON goes (default: bench/results)")
    args = p.parse_args(argv)
    res = asyncio.run(main_async(args))
    print_tables(res)
    report.write_json("replication_bench", json.loads(json.dumps(res, default=str)),
                      directory=Path(args.results_dir) if args.results_dir else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
