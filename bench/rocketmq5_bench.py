"""RocketMQ 5 endpoint benchmark: the official client (``rocketmq-python-client`` 5.1.2, one message per call)
against one broker's apache.rocketmq.v2 endpoint, beside the pyrmq SDK in the same run.

Starts a nameserver and one broker (ASYNC_MASTER, ASYNC_FLUSH) as real processes, lets its boot-time work settle,
then, on a fresh topic each:

- ``rmq5_send``: the official Producer sends ``--count`` small messages one at a time (``producer.send``, each a
  SendMessage call) from its own process (harness/rocketmq5.py, its own venv);
- ``rmq5_receive``: an official SimpleConsumer receives (batch 32) and acks each message (one AckMessage per
  message, as the client does) until the topic is drained;
- ``sdk_send``: the SDK Producer sends the same bodies one at a time (``await producer.send``, one remoting send
  per message: one sender, so nothing coalesces).

- ``rmq5_send_async``: the official Producer keeps ``--inflight`` (64) ``send_async`` calls in flight, still one
  message per SendMessage call;
- ``rmq5_receive_Nc``: ``--consumers`` (4) SimpleConsumers of one group drain that topic at once (batch 32, one
  AckMessage per message);
- ``raw_send`` and ``floor_send`` (``bench.grpc_floor``): one plain grpc client sends ``--count`` SendMessage
  calls, one at a time and ``--inflight`` at once, with the official client's headers, to the broker and to
  servers whose SendMessage does nothing (grpc.aio as the endpoint runs it, and the other grpcio server kinds
  and options of ``bench.grpc_floor.SERVER_KINDS``): the floor's CPU per call is what grpcio costs before any
  pyrmq code runs, the difference is pyrmq's handler and store.

Reports msg/s, the broker's CPU per message and its main (event loop) thread's share (from /proc/<pid>/stat; for ``rmq5_send`` that is the CPU per
SendMessage call, the issue aims at <= 150 µs). Never passes or fails. The machine is shared: keep ``--count``
small. Usage: ``python -m bench.rocketmq5_bench [--count 3000] [--inflight 64] [--consumers 4] [--floors K,..]
[--flush SYNC_FLUSH] [--floors-only --floor-rounds N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cpu import cpu_s, settle, stat_cpu_s
from bench.grpc_floor import SERVER_KINDS
from bench.report import print_table, write_json
from bench.topics import create_routed_topic
from client import AdminClient, Message, Producer
from common import event_loop
from harness.procs import Broker, scratch_broker
from harness.rocketmq5 import Rmq5Client, client_python


async def make_topic(ns_addr: str, broker: Broker, topic: str, queues: int) -> None:
    async with AdminClient(ns_addr) as admin:
        await create_routed_topic(admin, broker.addr, topic, queues)


def cpu_split(pid: int) -> tuple[float, float]:
    """(process CPU s, main thread CPU s): the main thread runs the event loop, so grpc.aio's Python side and
    pyrmq's handlers; the others are gRPC core's (event_engine, the aio poller) and the store's."""
    return cpu_s(pid), stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")


def row(name: str, messages: int, elapsed_s: float, cpu0: tuple[float, float], cpu1: tuple[float, float],
        inflight: int = 1) -> dict:
    broker_cpu_s, main_cpu_s = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    return {
        "variant": name, "inflight": inflight, "messages": messages, "elapsed_s": round(elapsed_s, 2),
        "msg_per_s": round(messages / elapsed_s) if elapsed_s else 0,
        "broker_cpu_us_per_msg": round(broker_cpu_s / messages * 1e6, 1) if messages else None,
        "main_thread_us_per_msg": round(main_cpu_s / messages * 1e6, 1) if messages else None,
        "broker_cores": round(broker_cpu_s / elapsed_s, 2) if elapsed_s else None,
    }


def measure(broker: Broker, fn) -> tuple[object, float, tuple[float, float], tuple[float, float]]:
    c0, t0 = cpu_split(broker.pid), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, c0, cpu_split(broker.pid)


async def sdk_send(ns_addr: str, broker: Broker, topic: str, count: int) -> dict:
    async with Producer("BenchRmq5SdkProducer", ns_addr) as producer:
        await producer.send(Message(topic, b"warm"))  # route and channel outside the window
        c0, t0 = cpu_split(broker.pid), time.perf_counter()
        for i in range(count):
            await producer.send(Message(topic, f"m{i}".encode()))
        return row("sdk_send", count, time.perf_counter() - t0, c0, cpu_split(broker.pid))


def raw_send(name: str, addr: str, pid: int, topic: str, count: int, inflight: int = 1) -> dict:
    """``count`` SendMessage calls from ``bench.grpc_floor drive`` to ``addr``, ``inflight`` at once; CPU of
    process ``pid``."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with subprocess.Popen([sys.executable, "-m", "bench.grpc_floor", "drive", addr, str(count), topic, str(inflight)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) as driver:
        if driver.stdout.readline().strip() != "ready":
            raise RuntimeError(f"bench.grpc_floor drive {addr} did not start (exit {driver.wait(10)})")
        c0, t0 = cpu_split(pid), time.perf_counter()
        driver.stdin.write("go\n")
        driver.stdin.flush()
        if driver.stdout.readline().strip() != "done":
            raise RuntimeError(f"bench.grpc_floor drive {addr} failed (exit {driver.wait(10)})")
        elapsed, c1 = time.perf_counter() - t0, cpu_split(pid)
    return row(name, count, elapsed, c0, c1, inflight)


def floor_send(kind: str, count: int, inflights: tuple[int, ...]) -> list[dict]:
    """The null server of ``kind`` driven one call at a time and ``inflight`` at once (one server process)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with subprocess.Popen([sys.executable, "-m", "bench.grpc_floor", "serve", kind], stdout=subprocess.PIPE,
                          text=True, env=env) as server:
        try:
            port = int(server.stdout.readline())
            return [raw_send(f"floor_{kind}", f"127.0.0.1:{port}", server.pid, "BenchFloor", count, n)
                    for n in inflights]
        finally:
            server.terminate()


def drain_together(consumers: list[Rmq5Client]) -> list:
    """Every consumer drains at once; all they received."""
    cmds = [c.begin(op="drain", invisible_s=60, idle_receives=1, total_s=300) for c in consumers]
    return [m for c, cmd in zip(consumers, cmds, strict=True) for m in c.result(cmd, timeout_s=600)]


async def main_async(args) -> list[dict]:
    results: list[dict] = []
    if not args.floors_only:
        await broker_runs(args, results)
    for _ in range(args.floor_rounds):
        for kind in filter(None, args.floors.split(",")):
            for r in floor_send(kind, args.count, (1, args.inflight)):
                results.append(r)
                print(json.dumps(r), flush=True)
    return results


async def broker_runs(args, results: list[dict]) -> None:
    python = client_python()
    with (scratch_broker("rmq5-bench-", role="ASYNC_MASTER", flushDiskType=args.flush,
                         mappedFileSizeCommitLog=256 * 1024 * 1024) as (work, ns, broker),
          contextlib.ExitStack() as clients):  # the clients close before the broker stops
        print(f"broker settled after {await settle(broker.pid):.1f} s", flush=True)
        stamp = int(time.time() * 1000) % 10_000_000
        topic, sdk_topic = f"BenchRmq5_{stamp}", f"BenchRmq5Sdk_{stamp}"
        await make_topic(ns.addr, broker, topic, args.queues)
        await make_topic(ns.addr, broker, sdk_topic, args.queues)

        producer = Rmq5Client(python, work / "producer")
        clients.callback(producer.close)
        producer.call(timeout_s=60, op="producer", endpoint=broker.grpc_addr, topics=[topic])
        producer.call(op="send", topic=topic, body="warm")  # route and settings outside the window
        _, elapsed, c0, c1 = measure(broker, lambda: producer.call(timeout_s=600, op="send_many", topic=topic,
                                                                count=args.count, prefix="m"))
        results.append(row("rmq5_send", args.count, elapsed, c0, c1))
        print(json.dumps(results[-1]), flush=True)

        consumer = Rmq5Client(python, work / "consumer")
        clients.callback(consumer.close)
        consumer.call(timeout_s=60, op="simple_consumer", endpoint=broker.grpc_addr, group=f"BenchRmq5G_{stamp}",
                      topic=topic, await_s=1)
        got, elapsed, c0, c1 = measure(broker, lambda: consumer.call(timeout_s=600, op="drain", invisible_s=60,
                                                                  idle_receives=1, total_s=300))
        # the last, empty receive long-polled await_s (1 s) for nothing: leave it out of the rate
        results.append(row("rmq5_receive", len(got), max(elapsed - 1.0, 1e-3), c0, c1))
        print(json.dumps(results[-1]), flush=True)

        async_topic = f"BenchRmq5Async_{stamp}"
        await make_topic(ns.addr, broker, async_topic, args.queues)
        producer.call(op="send", topic=async_topic, body="warm")
        _, elapsed, c0, c1 = measure(broker, lambda: producer.call(
            timeout_s=600, op="send_many", topic=async_topic, count=args.count, prefix="a", inflight=args.inflight))
        results.append(row("rmq5_send_async", args.count, elapsed, c0, c1, args.inflight))
        print(json.dumps(results[-1]), flush=True)

        group = f"BenchRmq5G4_{stamp}"
        many = [Rmq5Client(python, work / f"consumer{i}") for i in range(args.consumers)]
        for c in many:
            clients.callback(c.close)
            c.call(timeout_s=60, op="simple_consumer", endpoint=broker.grpc_addr, group=group, topic=async_topic,
                   await_s=1)
        got, elapsed, c0, c1 = measure(broker, lambda: drain_together(many))
        results.append(row(f"rmq5_receive_{args.consumers}c", len(got), max(elapsed - 1.0, 1e-3), c0, c1,
                           args.consumers))
        print(json.dumps(results[-1]), flush=True)

        results.append(await sdk_send(ns.addr, broker, sdk_topic, args.count))
        print(json.dumps(results[-1]), flush=True)

        for n in (1, args.inflight):
            results.append(raw_send("raw_send", broker.grpc_addr, broker.pid, topic, args.count, n))
            print(json.dumps(results[-1]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=3000, help="messages per variant")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=64, help="calls in flight for the concurrent variants")
    ap.add_argument("--consumers", type=int, default=4, help="SimpleConsumers draining together")
    ap.add_argument("--floors", default=",".join(SERVER_KINDS), help="null server kinds (bench.grpc_floor); '' for none")
    ap.add_argument("--floors-only", action="store_true", help="only the null servers (no broker, no clients)")
    ap.add_argument("--floor-rounds", type=int, default=1, help="rounds over the floor kinds (interleaved)")
    ap.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH",
                    help="SYNC_FLUSH: every put waits for its group commit (concurrent sends then share appends)")
    args = ap.parse_args()
    results = event_loop.run(main_async(args))
    columns = list(results[0])
    print()
    print_table(f"RocketMQ 5 endpoint: {args.count} messages per variant, one per call (2 shared cores: noisy)", columns,
                [[r[c] for c in columns] for r in results])
    name = "rocketmq5_bench" if args.flush == "ASYNC_FLUSH" else "rocketmq5_bench_sync_flush"
    write_json(name + "_floors" if args.floors_only else name,
               {"args": vars(args), "runs": results})


if __name__ == "__main__":
    main()
