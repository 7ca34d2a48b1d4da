"""End-to-end benchmark: SDK Producer -> real broker process -> SDK PushConsumer, 1 KiB messages.

Starts a nameserver and one broker (ASYNC_MASTER, ASYNC_FLUSH, 1 GiB commitlog files) as real processes, then
``--senders`` concurrent coroutines each send one message at a time (``await producer.send``) for
``--duration`` seconds while a PushConsumer receives them (``--consumer``: ``inproc``, the default, shares the
producer's event loop; ``process`` runs it as an application of its own, as RocketMQ's producer and consumer
benchmark tools do, which on 2 cores makes three busy processes; ``none`` measures the produce path alone).
Reports:

- produce msg/s and MiB/s, send latency p50/p99/p999 (call to SendResult),
- send requests made and messages per request (the producer's coalescing),
- end-to-end latency p50/p99 (born timestamp, set by the producer, to the listener; ms clock),
- CPU µs per message of the broker and of the client processes (producer plus consumer; from /proc).

The consumer pulls up to ``--pull-batch`` (128) messages per request, the broker's in-memory pull caps are raised
to match (RocketMQ's 32 messages / 256 KiB would make pulls cost more broker CPU than sends), and it pauses
``--pull-interval-ms`` (2) after a partial pull. Every process runs on ``common.event_loop`` (uvloop when
installed; ``PYRMQ_EVENT_LOOP=asyncio`` for the standard loop).

Variants (``--variants``) are producer settings compared in one run, interleaved over ``--runs``; medians are
printed. Runs start once the fresh broker's boot-time work is over and after ``--warmup``
(3) seconds of unmeasured sending: the first seconds of a fresh broker measured ~30% more broker CPU per message
(35 vs 24-26 µs), which skewed medians of 3. Never passes or fails.
Usage: ``python -m bench.e2e_bench [--duration 10] [--runs 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cpu import cpu_s, settle
from bench.report import print_table, write_json
from bench.topics import create_routed_topic
from client import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from common import event_loop
from harness.procs import Broker, scratch_broker

MiB = 1024 * 1024
VARIANTS = {  # producer settings; "roundrobin" is the producer before pipelining and sticky queues
    "default": {},
    "nosticky": {"sticky_queue_bytes": 0},
    "depth1": {"pipeline_depth": 1},
    "roundrobin": {"pipeline_depth": 1, "sticky_queue_bytes": 0},
    "batch32": {"max_batch_messages": 32},
    "sticky1m": {"sticky_queue_bytes": 1048576},
    "depth4": {"pipeline_depth": 4, "max_inflight_per_queue": 4, "pipeline_min_batch": 8},
    "depth8": {"pipeline_depth": 8, "max_inflight_per_queue": 8, "pipeline_min_batch": 4},
}


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


async def run_once(
    ns_addr: str, broker: Broker, args, name: str, producer_kw: dict, duration_s: float | None = None
) -> dict:
    topic = f"Bench_{name}_{int(time.time() * 1000) % 10_000_000}"
    async with AdminClient(ns_addr) as admin:
        await create_routed_topic(admin, broker.addr, topic, args.queues)

    consumer = ConsumerSide(args, ns_addr, topic, f"BenchGroup_{name}")
    await consumer.start()

    body = os.urandom(args.body // 2).hex().encode()[: args.body]
    latencies: list[float] = []
    sent = 0
    async with Producer(f"BenchProducer_{name}", ns_addr, **producer_kw) as producer:
        await producer.send(Message(topic, body))  # route lookup and channel set-up outside the window
        base_rpcs = producer.stats.rpcs
        stop_at = 0.0

        async def sender() -> None:
            nonlocal sent
            perf = time.perf_counter
            lat = latencies.append
            while perf() < stop_at:
                t0 = perf()
                await producer.send(Message(topic, body))
                lat(perf() - t0)
                sent += 1

        cpu_b0, cpu_p0, cpu_k0 = cpu_s(broker.pid), cpu_s(), consumer.cpu_s()
        t0 = time.perf_counter()
        stop_at = t0 + (args.duration if duration_s is None else duration_s)
        await asyncio.gather(*(sender() for _ in range(args.senders)))
        elapsed = time.perf_counter() - t0
        cpu_b1, cpu_p1, cpu_k1 = cpu_s(broker.pid), cpu_s(), consumer.cpu_s()
        rpcs = producer.stats.rpcs - base_rpcs

    got = await consumer.finish(sent + 1)
    client_cpu = (cpu_p1 - cpu_p0) + (cpu_k1 - cpu_k0)  # the consumer process's share is 0 unless it has one
    return {
        "variant": name,
        "sent": sent,
        "elapsed_s": round(elapsed, 3),
        "msg_per_s": round(sent / elapsed),
        "mib_per_s": round(sent * args.body / elapsed / MiB, 1),
        "send_p50_ms": round(pct(latencies, 0.50) * 1000, 2),
        "send_p99_ms": round(pct(latencies, 0.99) * 1000, 2),
        "send_p999_ms": round(pct(latencies, 0.999) * 1000, 2),
        "rpcs": rpcs,
        "msgs_per_rpc": round(sent / max(1, rpcs), 1),
        "received": got["received"],
        "msgs_per_pull": got["msgs_per_pull"],
        "e2e_p50_ms": got["e2e_p50_ms"],
        "e2e_p99_ms": got["e2e_p99_ms"],
        "broker_cpu_us_per_msg": round((cpu_b1 - cpu_b0) / max(1, sent) * 1e6, 1),
        "client_cpu_us_per_msg": round(client_cpu / max(1, sent) * 1e6, 1),
        "consumer_cpu_us_per_msg": round((cpu_k1 - cpu_k0) / max(1, sent) * 1e6, 1),
    }


def make_consumer(args, ns_addr: str, topic: str, group: str, on_messages) -> PushConsumer:
    consumer = PushConsumer(
        group,
        ns_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        consume_batch_max_size=32,
        consume_concurrency=2,
        pull_batch_size=args.pull_batch,
        max_inflight_messages=4096,
        suspend_ms=2000,
        pull_interval_ms=args.pull_interval_ms,
    )
    consumer.subscribe(topic)

    def listener(msgs):
        on_messages(int(time.time() * 1000), msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_message_listener(listener)
    return consumer


class Tally:
    """What the consumer saw: a count and each message's born-to-listener latency (producer clock, same host)."""

    def __init__(self) -> None:
        self.received = 0
        self.e2e_ms: list[int] = []

    def __call__(self, now_ms: int, msgs) -> None:
        self.e2e_ms.extend(now_ms - m.born_timestamp for m in msgs)
        self.received += len(msgs)

    def summary(self, consumer: PushConsumer | None) -> dict:
        pulls = consumer.pull_api.pulls if consumer else 0
        return {
            "received": self.received,
            "msgs_per_pull": round(consumer.pull_api.pulled / max(1, pulls), 1) if consumer else 0.0,
            "e2e_p50_ms": pct(self.e2e_ms, 0.50),
            "e2e_p99_ms": pct(self.e2e_ms, 0.99),
        }


async def wait_received(tally: Tally, expect: int, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while tally.received < expect and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


class ConsumerSide:
    """The push consumer of one run: in this process (``--consumer inproc``), in a child process of its own
    (``process``), or absent (``none``). The child is this module with ``--serve-consumer``; it prints ``ready``
    once started, reads the expected count on stdin, and prints its summary as JSON."""

    def __init__(self, args, ns_addr: str, topic: str, group: str) -> None:
        self.args, self.ns_addr, self.topic, self.group = args, ns_addr, topic, group
        self.tally = Tally()
        self.consumer: PushConsumer | None = None
        self.child: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        mode = self.args.consumer
        if mode == "inproc":
            self.consumer = make_consumer(self.args, self.ns_addr, self.topic, self.group, self.tally)
            await self.consumer.start()
        elif mode == "process":
            self.child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.e2e_bench", "--serve-consumer", self.ns_addr, self.topic, self.group,
                "--pull-batch", str(self.args.pull_batch), "--pull-interval-ms", str(self.args.pull_interval_ms),
                cwd=str(REPO), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )
            line = await asyncio.wait_for(self.child.stdout.readline(), 30)
            if line.strip() != b"ready":
                raise RuntimeError(f"the consumer process did not start: {line!r}")

    def cpu_s(self) -> float:
        return cpu_s(self.child.pid) if self.child is not None else 0.0

    async def finish(self, expect: int) -> dict:
        if self.child is not None:
            self.child.stdin.write(f"{expect}\n".encode())
            await self.child.stdin.drain()
            out = await asyncio.wait_for(self.child.stdout.readline(), 60)
            await self.child.wait()
            return json.loads(out)
        if self.consumer is not None:
            await wait_received(self.tally, expect)
            await self.consumer.stop()
        return self.tally.summary(self.consumer)


async def serve_consumer(args) -> None:
    ns_addr, topic, group = args.serve_consumer
    tally = Tally()
    consumer = make_consumer(args, ns_addr, topic, group, tally)
    await consumer.start()
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await wait_received(tally, int(line))
    await consumer.stop()
    print(json.dumps(tally.summary(consumer)), flush=True)


def median_rows(results: list[dict]) -> list[dict]:
    out = []
    for name in dict.fromkeys(r["variant"] for r in results):
        rs = [r for r in results if r["variant"] == name]
        row = {"variant": name, "runs": len(rs)}
        for key in rs[0]:
            if key != "variant":
                row[key] = statistics.median(r[key] for r in rs)
        out.append(row)
    return out


async def main_async(args) -> list[dict]:
    results = []
    with scratch_broker(
        "e2e-bench-",
        role="ASYNC_MASTER",
        flushDiskType="ASYNC_FLUSH",
        mappedFileSizeCommitLog=1024 * MiB,
        # One pull may carry a whole --pull-batch (RocketMQ caps in-memory pulls at 32 messages / 256 KiB).
        maxTransferCountOnMessageInMemory=max(32, args.pull_batch),
        maxTransferBytesOnMessageInMemory=max(262_144, args.pull_batch * (args.body + 512)),
    ) as (_, ns, broker):
        print(f"broker settled after {await settle(broker.pid):.1f} s (boot-time file warm-up excluded)", flush=True)
        names = [v.strip() for v in args.variants.split(",") if v.strip()]
        if args.warmup > 0:  # unmeasured: the first seconds of a fresh broker cost ~30% more CPU per message
            await run_once(ns.addr, broker, args, f"warmup_{names[0]}", dict(VARIANTS[names[0]]), args.warmup)
        for run in range(args.runs):
            for name in names:
                kw = dict(VARIANTS[name])
                if args.linger_ms:
                    kw["linger_ms"] = args.linger_ms
                row = await run_once(ns.addr, broker, args, name, kw)
                row["run"] = run
                results.append(row)
                print(json.dumps(row), flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of sending per run")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of unmeasured sending before the runs (0: none)")
    ap.add_argument("--senders", type=int, default=64)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--pull-batch", type=int, default=128, help="consumer pull batch (and the broker's cap)")
    ap.add_argument("--pull-interval-ms", type=float, default=2.0, help="consumer pause after a partial pull")
    ap.add_argument("--linger-ms", type=float, default=0.0)
    ap.add_argument("--variants", default="default,roundrobin", help=f"comma-separated, of {sorted(VARIANTS)}")
    ap.add_argument(
        "--consumer", choices=("inproc", "process", "none"), default="inproc",
        help="where the push consumer runs: this process (default), its own process, or nowhere (produce only)",
    )
    ap.add_argument("--serve-consumer", nargs=3, metavar=("NAMESRV", "TOPIC", "GROUP"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help="JSON path (default bench/results/e2e_bench.json)")
    args = ap.parse_args()
    if args.serve_consumer:
        event_loop.run(serve_consumer(args))
        return
    results = event_loop.run(main_async(args))
    rows = median_rows(results)
    columns = [c for c in rows[0] if c != "run"]
    print()
    print_table(
        f"e2e: {args.senders} senders x {args.body} B, {args.duration:.0f} s, medians of {args.runs} run(s)",
        columns,
        [[r[c] for c in columns] for r in rows],
    )
    out = Path(args.out) if args.out else None
    write_json(
        out.stem if out else "e2e_bench",
        {"args": vars(args), "runs": results, "medians": rows},
        directory=out.parent if out else None,
    )

if __name__ == "__main__":
    main()
