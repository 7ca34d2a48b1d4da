"""What message trace costs a producer: msg/s and client CPU per message with ``enable_trace`` off and on.

One broker (traceTopicEnable=true) and one Producer in this process; ``--senders`` tasks each send 1 KiB messages
one at a time (closed loop) until ``--messages`` are answered. Runs alternate off/on ``--rounds`` times (medians).
With trace on, each answer adds a Pub record to the dispatcher's buffer and the records leave in trace messages of
up to 128 KB from the dispatcher's own producer; the table also shows how many records were dropped (none is the
expectation) and the broker's CPU per traced message.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.closed_loop import send_closed_loop
from bench.cpu import cpu_s, settle
from bench.report import median_of, print_table, write_json
from bench.topics import create_routed_topic
from client import AdminClient, Message, Producer
from harness.procs import scratch_broker


async def run(namesrv: str, broker_pid: int, topic: str, messages: int, senders: int, trace: bool) -> dict:
    producer = await Producer(f"bench_trace_{trace}", namesrv, enable_trace=trace).start()
    body = b"x" * 1024
    await producer.send(Message(topic, body))  # the route, the connection and the trace producer's route
    if trace:
        await producer.send(Message(topic, body))
    await settle(broker_pid)
    c0, b0, t0 = cpu_s(), cpu_s(broker_pid), time.perf_counter()
    await send_closed_loop(producer, lambda: Message(topic, body, keys="order-1"), messages, senders)
    wall = time.perf_counter() - t0
    await producer.stop()  # includes the last trace flush
    client_us, broker_us = (cpu_s() - c0) / messages * 1e6, (cpu_s(broker_pid) - b0) / messages * 1e6
    dispatcher = producer.trace.dispatcher if producer.trace else None
    return {"msg_s": messages / wall, "client_cpu_us": client_us, "broker_cpu_us": broker_us,
            "trace_sent": dispatcher.sent if dispatcher else 0, "trace_dropped": dispatcher.dropped if dispatcher else 0}


async def create(namesrv: str, broker_addr: str, topic: str) -> None:
    async with AdminClient(namesrv) as admin:
        await create_routed_topic(admin, broker_addr, topic, 4, timeout_s=10.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=30_000)
    ap.add_argument("--senders", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results: dict[bool, list[dict]] = {False: [], True: []}
    with scratch_broker("pyrmq-trace-bench-", traceTopicEnable=True) as (_, ns, broker):
        asyncio.run(create(ns.addr, broker.addr, "BenchTrace"))
        for r in range(args.rounds):
            for trace in (False, True) if r % 2 == 0 else (True, False):
                results[trace].append(asyncio.run(run(ns.addr, broker.pid, "BenchTrace", args.messages,
                                                      args.senders, trace)))

    def med(trace: bool, key: str) -> float:
        return median_of([x[key] for x in results[trace]])

    rows = [["off" if not t else "on", med(t, "msg_s"), med(t, "client_cpu_us"), med(t, "broker_cpu_us"),
             sum(x["trace_sent"] for x in results[t]), sum(x["trace_dropped"] for x in results[t])]
            for t in (False, True)]
    rows.append(["on/off", med(True, "msg_s") / med(False, "msg_s"),
                 med(True, "client_cpu_us") / med(False, "client_cpu_us"),
                 med(True, "broker_cpu_us") / med(False, "broker_cpu_us"), "", ""])
    print_table(f"message trace: producer, {args.senders} senders, 1 KiB, {args.messages:,} messages per run "
                f"(medians of {args.rounds})",
                ["trace", "msg/s", "client CPU µs/msg", "broker CPU µs/msg", "Pub records sent", "dropped"], rows)
    write_json("trace_bench", {"messages": args.messages, "senders": args.senders, "runs_off": results[False],
                               "runs_on": results[True]})


if __name__ == "__main__":
    main()
