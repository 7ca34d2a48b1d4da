"""Transactional send + commit against plain send, through the SDK, one run (issue 24's figure: >= 0.5 of plain).

One nameserver and one ASYNC_MASTER broker (real processes, the harness's), one topic of ``--queues`` queues.
``--senders`` coroutines each send ``--messages / senders`` 1 KiB messages one after another:

- plain: ``Producer.send`` (the SDK batches concurrent sends into one request per queue), and again with
  ``max_batch_messages=1`` (one request per message, as Java's producer sends);
- transactional: ``TransactionProducer.send_message_in_transaction`` with a local transaction that commits at
  once: a half (one request of its own, RocketMQ sends no half in a batch), then END_TRANSACTION oneway, which
  the broker answers with two writes (the real message, then its op record). The clock stops when the broker's
  ``rocketmq_commit_messages_total`` counted every commit, not when the last oneway left. Halves and ENDs arriving
  together share their appends on the broker (``broker.transaction.coalesce``).

The phases run one after another, so their msg/s move with whatever else the machine runs meanwhile; the CPU per
message of broker and client (from /proc) moves much less, and ``cpu_ratio`` (plain over transactional) is the
msg/s ratio the two would reach on cores of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path


from bench.cpu import cpu_s
from bench.report import print_table, write_json
from client import AdminClient, Message, Producer
from client.transaction_producer import LocalTransactionState, TransactionProducer
from harness.metrics_page import first_sample
from harness.procs import Broker, Namesrv
from harness.waiting import async_wait_until


def commits(broker: Broker) -> float:
    return first_sample(broker.metrics_port, "rocketmq_commit_messages_total", timeout_s=5) or 0.0


async def run_senders(senders: int, per_sender: int, send_one) -> None:
    async def sender(s: int) -> None:
        for i in range(per_sender):
            await send_one(s, i)

    await asyncio.gather(*(sender(s) for s in range(senders)))


async def plain(ns: Namesrv, topic: str, senders: int, per_sender: int, body: bytes, **conf) -> float:
    async with Producer(f"bench-plain-{len(conf)}", ns.addr, **conf) as producer:
        await producer.send(Message(topic, body))  # route and connection before the clock
        t0 = time.perf_counter()
        await run_senders(senders, per_sender, lambda s, i: producer.send(Message(topic, body)))
        return senders * per_sender / (time.perf_counter() - t0)


async def transactional(ns: Namesrv, broker: Broker, topic: str, senders: int, per_sender: int,
                        body: bytes) -> float:
    def commit(msg, arg):
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("bench-tx", ns.addr) as producer:
        await producer.send_message_in_transaction(Message(topic, body), commit)
        before = await asyncio.to_thread(commits, broker)
        t0 = time.perf_counter()
        await run_senders(senders, per_sender,
                          lambda s, i: producer.send_message_in_transaction(Message(topic, body), commit))
        target = before + senders * per_sender
        while await asyncio.to_thread(commits, broker) < target:
            await asyncio.sleep(0.02)
        return senders * per_sender / (time.perf_counter() - t0)


async def run(args) -> dict:
    body = b"x" * args.size
    per_sender = max(1, args.messages // args.senders)
    with tempfile.TemporaryDirectory(prefix="txbench-") as tmp:
        root = Path(tmp)
        with Namesrv(root / "ns") as ns, Broker(root / "b", name="broker-txb", namesrv_addr=ns.addr) as broker:
            async with AdminClient(ns.addr) as admin:
                await admin.update_topic(broker.addr, "TxBench", read_queue_nums=args.queues,
                                         write_queue_nums=args.queues)

                async def routed() -> bool:
                    return len((await admin.topic_route("TxBench")).publish_queues) == args.queues

                await async_wait_until(routed, 15.0, "the nameserver to route TxBench")
            n = per_sender * args.senders
            b0, c0 = cpu_s(broker.pid), cpu_s()
            plain_rate = await plain(ns, "TxBench", args.senders, per_sender, body)
            b1, c1 = cpu_s(broker.pid), cpu_s()
            tx_rate = await transactional(ns, broker, "TxBench", args.senders, per_sender, body)
            b2, c2 = cpu_s(broker.pid), cpu_s()
            single_rate = await plain(ns, "TxBench", args.senders, per_sender, body, max_batch_messages=1)
            b3, c3 = cpu_s(broker.pid), cpu_s()
    cpu = {"plain_broker_cpu_us_per_msg": round((b1 - b0) / n * 1e6, 1),
           "plain_client_cpu_us_per_msg": round((c1 - c0) / n * 1e6, 1),
           "tx_broker_cpu_us_per_msg": round((b2 - b1) / n * 1e6, 1),
           "tx_client_cpu_us_per_msg": round((c2 - c1) / n * 1e6, 1),
           "single_broker_cpu_us_per_msg": round((b3 - b2) / n * 1e6, 1),
           "single_client_cpu_us_per_msg": round((c3 - c2) / n * 1e6, 1),
           # CPU per message of plain over transactional, broker and client together: the msg/s ratio the two
           # would reach on cores they had to themselves (the msg/s ratio moves with whatever else runs)
           "cpu_ratio": round((b1 - b0 + c1 - c0) / (b2 - b1 + c2 - c1), 3),
           "cpu_ratio_to_one_per_request": round((b3 - b2 + c3 - c2) / (b2 - b1 + c2 - c1), 3)}
    return {"senders": args.senders, "messages": per_sender * args.senders, "body_bytes": args.size,
            "plain_msgs_per_s": round(plain_rate), "transactional_msgs_per_s": round(tx_rate),
            "ratio": round(tx_rate / plain_rate, 3), "plain_one_per_request_msgs_per_s": round(single_rate),
            "ratio_to_one_per_request": round(tx_rate / single_rate, 3), **cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--senders", type=int, default=64)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=4)
    args = ap.parse_args()
    result = asyncio.run(run(args))
    print_table("plain send with one message per request (SDK, one run)",
                ["plain msg/s", "transactional / it", "broker CPU µs/msg", "client", "by CPU: transactional / it"],
                [[result["plain_one_per_request_msgs_per_s"], result["ratio_to_one_per_request"],
                  result["single_broker_cpu_us_per_msg"], result["single_client_cpu_us_per_msg"],
                  result["cpu_ratio_to_one_per_request"]]])
    print_table("transactional send + commit vs plain send (SDK, one run)",
                ["senders", "messages", "plain msg/s", "transactional msg/s", "ratio", "broker CPU µs/msg plain",
                 "tx", "client CPU µs/msg plain", "tx", "by CPU: ratio"],
                [[result["senders"], result["messages"], result["plain_msgs_per_s"],
                  result["transactional_msgs_per_s"], result["ratio"], result["plain_broker_cpu_us_per_msg"],
                  result["tx_broker_cpu_us_per_msg"], result["plain_client_cpu_us_per_msg"],
                  result["tx_client_cpu_us_per_msg"], result["cpu_ratio"]]])
    write_json("transaction_bench", result)


if __name__ == "__main__":
    main()
