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

Reports msg/s and the broker's CPU per message (from /proc/<pid>/stat; for ``rmq5_send`` that is the CPU per
SendMessage call, the issue aims at <= 150 µs). Never passes or fails. The machine is shared: keep ``--count``
small. Usage: ``python -m bench.rocketmq5_bench [--count 3000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.e2e_bench import cpu_s, settle
from bench.report import print_table, write_json
from client import AdminClient, Message, Producer
from common import event_loop
from harness.rocketmq5 import Rmq5Client, client_python
from harness.procs import Broker, Namesrv


async def make_topic(ns_addr: str, broker: Broker, topic: str, queues: int) -> None:
    async with AdminClient(ns_addr) as admin:
        await admin.update_topic(broker.addr, topic, read_queue_nums=queues, write_queue_nums=queues)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if (await admin.topic_route(topic)).publish_queues:
                    return
            except Exception:  # noqa: BLE001, S110 - not routed yet
                pass
            await asyncio.sleep(0.1)


def row(name: str, messages: int, elapsed_s: float, broker_cpu_s: float) -> dict:
    return {
        "variant": name, "messages": messages, "elapsed_s": round(elapsed_s, 2),
        "msg_per_s": round(messages / elapsed_s) if elapsed_s else 0,
        "broker_cpu_us_per_msg": round(broker_cpu_s / messages * 1e6, 1) if messages else None,
        "broker_cores": round(broker_cpu_s / elapsed_s, 2) if elapsed_s else None,
    }


def measure(broker: Broker, fn) -> tuple[object, float, float]:
    c0, t0 = cpu_s(broker.pid), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, cpu_s(broker.pid) - c0


async def sdk_send(ns_addr: str, broker: Broker, topic: str, count: int) -> dict:
    async with Producer("BenchRmq5SdkProducer", ns_addr) as producer:
        await producer.send(Message(topic, b"warm"))  # route and channel outside the window
        c0, t0 = cpu_s(broker.pid), time.perf_counter()
        for i in range(count):
            await producer.send(Message(topic, f"m{i}".encode()))
        return row("sdk_send", count, time.perf_counter() - t0, cpu_s(broker.pid) - c0)


async def main_async(args) -> list[dict]:
    python = client_python()
    work = Path(tempfile.mkdtemp(prefix="rmq5-bench-"))
    ns = Namesrv(work / "namesrv").start()
    broker = Broker(work / "broker", name="broker-bench", namesrv_addr=ns.addr, role="ASYNC_MASTER",
                    flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=256 * 1024 * 1024).start()
    results: list[dict] = []
    clients: list[Rmq5Client] = []
    try:
        print(f"broker settled after {await settle(broker.pid):.1f} s", flush=True)
        stamp = int(time.time() * 1000) % 10_000_000
        topic, sdk_topic = f"BenchRmq5_{stamp}", f"BenchRmq5Sdk_{stamp}"
        await make_topic(ns.addr, broker, topic, args.queues)
        await make_topic(ns.addr, broker, sdk_topic, args.queues)

        producer = Rmq5Client(python, work / "producer")
        clients.append(producer)
        producer.call(timeout_s=60, op="producer", endpoint=broker.grpc_addr, topics=[topic])
        producer.call(op="send", topic=topic, body="warm")  # route and settings outside the window
        _, elapsed, cpu = measure(broker, lambda: producer.call(timeout_s=600, op="send_many", topic=topic,
                                                                count=args.count, prefix="m"))
        results.append(row("rmq5_send", args.count, elapsed, cpu))
        print(json.dumps(results[-1]), flush=True)

        consumer = Rmq5Client(python, work / "consumer")
        clients.append(consumer)
        consumer.call(timeout_s=60, op="simple_consumer", endpoint=broker.grpc_addr, group=f"BenchRmq5G_{stamp}",
                      topic=topic, await_s=1)
        got, elapsed, cpu = measure(broker, lambda: consumer.call(timeout_s=600, op="drain", invisible_s=60,
                                                                  idle_receives=1, total_s=300))
        # the last, empty receive long-polled await_s (1 s) for nothing: leave it out of the rate
        results.append(row("rmq5_receive", len(got), max(elapsed - 1.0, 1e-3), cpu))
        print(json.dumps(results[-1]), flush=True)

        results.append(await sdk_send(ns.addr, broker, sdk_topic, args.count))
        print(json.dumps(results[-1]), flush=True)
    finally:
        for c in clients:
            c.close()
        broker.stop()
        ns.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=3000, help="messages per variant")
    ap.add_argument("--queues", type=int, default=4)
    args = ap.parse_args()
    results = event_loop.run(main_async(args))
    columns = list(results[0])
    print()
    print_table(f"RocketMQ 5 endpoint: {args.count} messages per variant, one per call", columns,
                [[r[c] for c in columns] for r in results])
    write_json("rocketmq5_bench", {"args": vars(args), "runs": results})


if __name__ == "__main__":
    main()
