"""Failover: time from SIGKILL of a master to the first message a consumer gets from its slave.

Per run, real processes on 127.0.0.1: a nameserver, a SYNC_MASTER and its slave (``slaveReadEnable=true``).
The topic is created and filled through the master (SYNC, so every message is on the slave too), then a
PullConsumer reads one queue in small pulls. After a few pulls the master is SIGKILLed and the clock starts;
it stops at the first FOUND pull served by the slave. Reported per run: that time, how many pulls failed in
between, and the offset the consumer continued from (it must be the next one: nothing skipped, nothing re-read).

For scale: RocketMQ's client keeps pulling from a dead master, retrying every 3 s, until the nameserver drops
it and the client's next 30 s route poll notices (spec §5.4), so up to about 30 s after a kill -9.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.report import median_of, print_table, write_json
from client import AdminClient, Message, MessageQueue, Producer, PullConsumer, PullStatus
from harness.procs import Broker, Namesrv

TOPIC = "FailoverBench"
BROKER = "broker-f"


async def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout_s:.0f}s: {what}")
        await asyncio.sleep(0.1)


async def one_run(workdir: Path, messages: int) -> dict:
    ns = Namesrv(workdir / "ns").start()
    common = {"slaveReadEnable": True, "mappedFileSizeCommitLog": 16 * 1024 * 1024}
    master = Broker(workdir / "m", name=BROKER, namesrv_addr=ns.addr, role="SYNC_MASTER", **common).start()
    slave = Broker(
        workdir / "s",
        name=BROKER,
        namesrv_addr=ns.addr,
        role="SLAVE",
        broker_id=1,
        haMasterAddress=master.ha_addr,
        slaveSynchronizeInterval=1000,
        **common,
    ).start()
    admin = await AdminClient(ns.addr).start()
    producer = await Producer("failover-bench-producer", ns.addr).start()
    consumer = await PullConsumer("failover-bench-group", ns.addr).start()
    try:
        await admin.update_topic(master.addr, TOPIC, read_queue_nums=1, write_queue_nums=1)

        async def slave_knows_topic() -> bool:
            configs = await admin.all_topic_configs(slave.addr)
            return any(c.topic_name == TOPIC for c in configs.topic_configs)

        await _wait(slave_knows_topic, 20, "the slave's metadata sync to copy the topic")
        for i in range(messages):
            await producer.send(Message(TOPIC, f"m{i}".encode()))
        mq = MessageQueue(TOPIC, BROKER, 0)
        offset, pulls_before = 0, 0
        while pulls_before < 5:  # a consumer in steady state against the master
            result = await consumer.pull(mq, offset, max_nums=4, timeout_s=3)
            assert result.status is PullStatus.FOUND and not result.from_slave, result
            offset, pulls_before = result.next_begin_offset, pulls_before + 1
        master.kill()
        killed_at = time.monotonic()
        failed = 0
        while True:
            if time.monotonic() - killed_at > 60:
                raise TimeoutError("no pull served by the slave within 60 s of the kill")
            try:
                result = await consumer.pull(mq, offset, max_nums=4, timeout_s=3)
            except Exception:
                failed += 1
                continue
            if result.status is PullStatus.FOUND:
                break
            failed += 1
        elapsed_ms = (time.monotonic() - killed_at) * 1000
        first = result.messages[0]
        return {
            "kill_to_first_message_ms": round(elapsed_ms, 1),
            "failed_pulls": failed,
            "served_by_slave": result.from_slave,
            "continued_at_offset": first.queue_offset,
            "expected_offset": offset,
        }
    finally:
        await consumer.stop()
        await producer.stop()
        await admin.stop()
        for proc in (slave, master, ns):
            proc.stop()


async def main_async(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="pyrmq-failover-", dir=args.tmp))
    runs = []
    try:
        for i in range(args.runs):
            runs.append(await one_run(root / f"run{i}", args.messages))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [
        [i, r["kill_to_first_message_ms"], r["failed_pulls"], "yes" if r["served_by_slave"] else "no",
         r["continued_at_offset"],
         r["expected_offset"]]
        for i, r in enumerate(runs)
    ]
    print_table(
        "SIGKILL of a SYNC_MASTER -> first message consumed from its slave",
        ["run", "ms", "failed pulls", "from slave", "continued at", "expected"],
        rows,
    )
    times = [r["kill_to_first_message_ms"] for r in runs]
    summary = {"median_ms": median_of(times), "min_ms": min(times), "max_ms": max(times)}
    print(f"median {summary['median_ms']:.0f} ms (min {summary['min_ms']:.0f}, max {summary['max_ms']:.0f})")
    return {"args": vars(args), "runs": runs, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover_bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200, help="messages in the queue before the kill")
    parser.add_argument("--tmp", default=None, help="directory for the stores (default: system temp)")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    write_json("failover_bench", result)
    bad = [r for r in result["runs"] if not r["served_by_slave"] or r["continued_at_offset"] != r["expected_offset"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
