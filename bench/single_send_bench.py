"""One message per request, the way RocketMQ's own clients send (issue 26 goal 2): a SYNC_MASTER and its SLAVE
driven with many single-message SEND_MESSAGE(_V2) requests in flight, reporting the master's CPU per message and
msg/s.

Java's, Go's, Rust's and the C++ client send one message per request unless the application batches; a
SYNC_MASTER must then share the append and the replica wait between concurrent requests, or each message pays a
whole put (record, pwrite, consume-queue write, HA wakeup, a waiter) of its own.

Per run (one tree, everything fresh): a nameserver, a SYNC_MASTER and its SLAVE (``python -m namesrv|broker`` of
the tree, the default configuration except addresses, ports, paths and the HA secret), the topic created on the
cluster with ``--queues`` queues; then one window per driver, each after its own warmup:

- ``json``: ``--connections`` remoting connections, ``--inflight`` requests in flight on each, every request a
  SEND_MESSAGE_V2 (310) with a JSON header and one 1 KiB body (properties as Java's client writes them: UNIQ_KEY,
  WAIT, TAGS), queues round robin;
- ``binary``: the same with ROCKETMQ binary headers and code 10 (full field names, as the Go client sends);
- ``cpp``: Apache's C++ client (PyPI ``rocketmq`` 0.4.4, tests/compat/) with ``--cpp-threads`` threads each
  calling ``send_sync`` on one producer (one connection, a request in flight per thread); skipped, saying why,
  where the library does not load.

The drivers run in this process (the load generator is the same for every tree: this checkout's remoting codec),
so their CPU competes with the brokers' on the same cores, as a co-located application would. CPU is utime+stime
from /proc over the window. Trees (``--tree NAME=PATH``, see ``bench.trees``) are interleaved ABBA; ratios are
against the first. Never passes or fails.

    python -m bench.single_send_bench --tree base=/tmp/pyrmq-base --tree this=. --runs 2 --seconds 6
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.cpu import cpu_s, settle  # noqa: E402
from bench.deploy_bench import Server, start_cluster  # noqa: E402
from bench.topics import create_routed_topic  # noqa: E402

DRIVERS = ("json", "binary", "cpp")
GOAL_MASTER_US, GOAL_X = 35.0, 2.5
ISSUE = {"rocketmq4_client_msg_per_s": 10_000, "master_cpu_us_per_msg": 100.0}


_TICKS = os.sysconf("SC_CLK_TCK")


def _sys_s(pid: int) -> float:
    """System (kernel) CPU seconds of ``pid``: on loopback the sender's syscalls carry the TCP work of both ends."""
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[12]) / _TICKS


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class RemotingDriver:
    """Many single-message sends in flight over raw remoting connections (the producer side of RocketMQ's
    clients, without their route and retry logic: every request is one message to the master)."""

    def __init__(self, addr: str, topic: str, queues: int, *, binary: bool, connections: int, inflight: int,
                 body: int) -> None:
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)
        self.topic, self.queues, self.binary = topic, queues, binary
        self.connections, self.inflight = connections, inflight
        self.body = os.urandom(body)
        self.sent = 0
        self.codes: dict[int, int] = {}
        self.errors: dict[str, int] = {}
        self.latencies: list[float] = []
        self._stop = False
        self._seq = itertools.count()
        self._conns: list = []

    def _request(self):
        from remoting.codes import RequestCode
        from remoting.frame_codec import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, RemotingCommand

        n = next(self._seq)
        props = f"UNIQ_KEY\x01{n:032X}\x02WAIT\x01true\x02TAGS\x01TagA"
        born = str(time.time_ns() // 1_000_000)
        queue = str(n % self.queues)
        if self.binary:  # code 10 with full names, as the Go client sends
            ext = {"producerGroup": "SingleSendPG", "topic": self.topic, "defaultTopic": "TBW102",
                   "defaultTopicQueueNums": "4", "queueId": queue, "sysFlag": "0", "bornTimestamp": born,
                   "flag": "0", "properties": props, "reconsumeTimes": "0", "unitMode": "false",
                   "batch": "false"}
            return RemotingCommand(RequestCode.SEND_MESSAGE, ext=ext, body=self.body,
                                   serialize_type=SERIALIZE_ROCKETMQ)
        ext = {"a": "SingleSendPG", "b": self.topic, "c": "TBW102", "d": "4", "e": queue, "f": "0", "g": born,
               "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}
        return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext=ext, body=self.body, serialize_type=SERIALIZE_JSON)

    async def start(self) -> None:
        from remoting.connection import Connection

        loop = asyncio.get_running_loop()
        for _ in range(self.connections):
            _, conn = await loop.create_connection(lambda: Connection(None, name="single-send"), self.host, self.port)
            self._conns.append(conn)
        self._tasks = [loop.create_task(self._sender(c)) for c in self._conns for _ in range(self.inflight)]

    async def _sender(self, conn) -> None:
        while not self._stop:
            t0 = time.perf_counter()
            try:
                resp = await conn.invoke(self._request(), 10.0)
            except Exception as exc:  # noqa: BLE001 - counted; the window reports it
                self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.05)
                continue
            self.latencies.append(time.perf_counter() - t0)
            self.codes[resp.code] = self.codes.get(resp.code, 0) + 1
            if resp.code == 0:
                self.sent += 1

    async def stop(self) -> None:
        self._stop = True
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for c in self._conns:
            c.close("bench done")


class CppDriver:
    """Apache's C++ client: ``threads`` threads calling ``send_sync`` on one producer, one message each."""

    def __init__(self, namesrv: str, topic: str, threads: int, body: int, home: Path) -> None:
        from rocketmq.client import Message, Producer

        self.Message = Message
        self.topic, self.threads = topic, threads
        self.body = "x" * body
        self.producer = Producer(f"SingleSendCpp{os.getpid()}", timeout=10_000)
        self.producer.set_namesrv_addr(namesrv)
        previous = os.environ.get("HOME")
        home.mkdir(parents=True, exist_ok=True)
        os.environ["HOME"] = str(home)  # the library logs under HOME, read when its first client starts
        try:
            self.producer.start()
        finally:
            if previous is not None:
                os.environ["HOME"] = previous
        self.sent = 0
        self.codes: dict[int, int] = {}
        self.errors: dict[str, int] = {}
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def probe(self, deadline_s: float = 60.0) -> bool:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            try:
                self._send_one()
                return True
            except Exception:  # noqa: BLE001 - not routed yet: the nameserver learns the topic by registration
                time.sleep(0.5)
        return False

    def _send_one(self) -> None:
        msg = self.Message(self.topic)
        msg.set_tags("TagA")
        msg.set_body(self.body)
        self.producer.send_sync(msg)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                self._send_one()
            except Exception as exc:  # noqa: BLE001
                with self._lock:
                    self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                continue
            dt = time.perf_counter() - t0
            with self._lock:
                self.sent += 1
                self.latencies.append(dt)
                self.codes[0] = self.codes.get(0, 0) + 1

    async def start(self) -> None:
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(self.threads)]
        for t in self._threads:
            t.start()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(lambda: [t.join(30) for t in self._threads])
        self.producer.shutdown()


def cpp_load_error() -> str | None:
    try:
        import rocketmq.client  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"the C++ client (PyPI rocketmq 0.4.4) does not load here: {exc}"
    return None


async def _create_topic(namesrv: str, master_addr: str, topic: str, queues: int) -> None:
    from client.admin import AdminClient

    async with AdminClient(namesrv) as admin:
        await create_routed_topic(admin, master_addr, topic, queues, timeout_s=60.0)


async def _window(driver, pids: dict[str, int], warmup: float, seconds: float) -> dict:
    await driver.start()
    await asyncio.sleep(warmup)
    s0, c0 = driver.sent, {k: cpu_s(p) for k, p in pids.items()}
    k0 = _sys_s(pids["master"])
    me0 = time.process_time()
    lat0 = len(driver.latencies)
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    s1, c1 = driver.sent, {k: cpu_s(p) for k, p in pids.items()}
    k1 = _sys_s(pids["master"])
    me1 = time.process_time()
    elapsed = time.perf_counter() - t0
    lat = driver.latencies[lat0:]
    await driver.stop()
    sent = max(1, s1 - s0)
    row = {"msg_per_s": round((s1 - s0) / elapsed)}
    for k in pids:
        row[f"{k}_cpu_us_per_msg"] = round((c1[k] - c0[k]) / sent * 1e6, 1)
    row["master_sys_us_per_msg"] = round((k1 - k0) / sent * 1e6, 1)
    row["driver_cpu_us_per_msg"] = round((me1 - me0) / sent * 1e6, 1)
    row["master_cores"] = round((c1["master"] - c0["master"]) / elapsed, 2)
    row["p50_ms"] = round(_percentile(lat, 0.5) * 1e3, 2)
    row["p99_ms"] = round(_percentile(lat, 0.99) * 1e3, 2)
    row["codes"] = {str(k): v for k, v in sorted(driver.codes.items())}
    row["errors"] = dict(driver.errors)
    return row


async def run_once(tree, run: int, args, root: Path) -> list[dict]:
    work = root / f"{tree.name}-{run}"
    servers: list[Server] = []
    rows = []
    try:
        _, master, slave, ns_addr = await start_cluster(tree, "sync", work, servers)
        master_addr = f"127.0.0.1:{master.conf['listenPort']}"
        topic = f"Single_{tree.name}_{run}_{int(time.time() * 1000) % 10_000_000}"
        await _create_topic(ns_addr, master_addr, topic, args.queues)
        await settle(master.pid, slave.pid)
        pids = {"master": master.pid, "slave": slave.pid}
        idle0, t_idle = cpu_s(master.pid), time.perf_counter()
        await asyncio.sleep(args.idle)
        idle_cores = (cpu_s(master.pid) - idle0) / (time.perf_counter() - t_idle)
        for name in args.drivers:
            if name == "cpp":
                why = cpp_load_error()
                if why:
                    rows.append({"tree": tree.name, "run": run, "driver": name, "skipped": why})
                    continue
                driver = CppDriver(ns_addr, topic, args.cpp_threads, args.body, work / "cpp-home")
                if not await asyncio.to_thread(driver.probe):
                    raise RuntimeError("the C++ producer never got SEND_OK")
            else:
                driver = RemotingDriver(master_addr, topic, args.queues, binary=name == "binary",
                                        connections=args.connections, inflight=args.inflight, body=args.body)
            row = await _window(driver, pids, args.warmup, args.seconds)
            # what the idle master burns anyway (timers, flush, metrics), spread over the window's messages
            idle_us = idle_cores * args.seconds / max(1, row["msg_per_s"] * args.seconds) * 1e6
            row["master_idle_cores"] = round(idle_cores, 3)
            row["master_net_cpu_us_per_msg"] = round(row["master_cpu_us_per_msg"] - idle_us, 1)
            row = {"tree": tree.name, "run": run, "driver": name, **row}
            print(json.dumps(row), flush=True)
            rows.append(row)
            await settle(master.pid, slave.pid, limit_s=10)
    finally:
        for s in reversed(servers):
            s.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return rows


COLUMNS = ["tree", "driver", "runs", "msg_per_s", "x_msg_per_s", "master_cpu_us_per_msg", "x_master_cpu",
           "master_net_cpu_us_per_msg", "master_sys_us_per_msg",
           "slave_cpu_us_per_msg", "driver_cpu_us_per_msg", "master_cores", "p50_ms", "p99_ms"]


def summarize(results: list[dict], trees) -> list[dict]:
    from bench.trees import median_rows

    rows = median_rows([r for r in results if "skipped" not in r], ("tree", "driver"))
    by = {(r["tree"], r["driver"]): r for r in rows}
    for r in rows:
        base = by.get((trees[0].name, r["driver"]))
        r["x_msg_per_s"] = round(r["msg_per_s"] / base["msg_per_s"], 2) if base and base["msg_per_s"] else None
        r["x_master_cpu"] = (round(r["master_cpu_us_per_msg"] / base["master_cpu_us_per_msg"], 2)
                             if base and base["master_cpu_us_per_msg"] else None)
    return rows


async def main_async(args, trees) -> list[dict]:
    from bench.trees import interleaved

    root = Path(tempfile.mkdtemp(prefix="single-send-", dir=args.workdir or None))
    results: list[dict] = []
    try:
        for run, tree in interleaved(args.runs, trees):
            results += await run_once(tree, run, args, root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="a pyrmq source tree (repeatable; ratios against the first; default: this tree)")
    ap.add_argument("--drivers", default="json,binary,cpp", help=f"comma-separated of {', '.join(DRIVERS)}")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=6.0, help="measured seconds per window")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--idle", type=float, default=3.0, help="seconds of the idle master's CPU measured per run")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--inflight", type=int, default=8, help="requests in flight per connection")
    ap.add_argument("--cpp-threads", type=int, default=32)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--workdir", default="")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", default="", help="JSON path (default bench/results/single_send_bench.json)")
    args = ap.parse_args(argv)
    args.drivers = [d.strip() for d in args.drivers.split(",") if d.strip()]
    if not args.drivers or any(d not in DRIVERS for d in args.drivers):
        raise SystemExit(f"--drivers: of {DRIVERS}")

    from bench.report import print_table, write_json
    from bench.trees import checked_trees

    trees, described = checked_trees(args.tree)
    results = asyncio.run(main_async(args, trees))
    rows = summarize(results, trees)
    print()
    print_table(
        f"single-message sends to a SYNC_MASTER + SLAVE: {args.connections} connections x {args.inflight} in flight "
        f"(cpp: {args.cpp_threads} threads), {args.body} B, {args.seconds:.0f} s windows, medians of {args.runs}; "
        f"ratios against {trees[0].name}",
        COLUMNS, [[r.get(c) for c in COLUMNS] for r in rows],
    )
    for r in results:
        if "skipped" in r:
            print(f"{r['tree']}/{r['driver']} skipped: {r['skipped']}")
    goals = {f"{r['tree']}/{r['driver']}": {
        "master_cpu_us_le_35": r["master_cpu_us_per_msg"] <= GOAL_MASTER_US,
        "x_msg_per_s_ge_2.5": (r["x_msg_per_s"] or 0) >= GOAL_X} for r in rows if r["tree"] != trees[0].name}
    for k, v in goals.items():
        print(f"goals {k}: {v}")
    out = Path(args.out) if args.out else None
    write_json(out.stem if out else "single_send_bench",
               {"args": vars(args), "issue_figures": ISSUE, "trees": described, "runs": results, "medians": rows,
                "goals": goals},
               directory=out.parent if out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
