"""Controller-mode failover: time from SIGKILL of a master to the first SEND_OK on the newly elected master, and to
the first message (sent after the kill) that a pull consumer gets from it.

Per run, real processes on 127.0.0.1: one etcd, a nameserver running the controller, a broker group of three
controller-mode brokers (heartbeat every 200 ms, controllerHeartBeatTimeoutMills 1.5 s; the SIGKILL closes the
master's controller connection, so the controller elects at once). The SDK producer sends SYNC to the group's only
topic; the master is SIGKILLed and the producer sends in a loop (each failure retried at once) until a SEND_OK.
A PullConsumer, caught up on both queues before the kill, pulls from there in a loop (failures retried every 10 ms).
Reported per run: both times, the failed send attempts, and the new master's brokerId.

``--compose``: the same measurement on docker-compose.controller.yml (three etcd containers, two nameservers running
the controller, broker-a of three brokers, the defaults of its confs: heartbeat 1 s, controllerHeartBeatTimeoutMills
10 s). The master's container is found as ``mqctl kill master -b broker-a`` finds it and killed with the Docker API
(SIGKILL; the clock starts when the engine has delivered it); after each run the killed container is started again
and the next run waits until the group has all three members in its SyncStateSet. The cluster is started for the
bench (its own subnet, taken down after) unless ``--project`` names a running one (``--net`` its address prefix).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.report import median_of, print_table, write_json
from client import AdminClient, Message, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus
from harness.controller_mode import controller_broker, controller_namesrv, replica_info
from harness.etcd import EtcdServer, ensure_etcd

TOPIC = "ControllerFailoverBench"
GROUP = "broker-cf"


async def measure(producer: Producer, consumer: PullConsumer, topic: str, group: str, queues: int,
                  kill: Callable[[], Awaitable[None]]) -> dict:
    """Catch the consumer up on every queue, ``kill()`` the master, then time the first SEND_OK (sends retried at
    once) and the first message pulled after the kill (pulls retried every 10 ms)."""
    offsets = {}
    for q in range(queues):
        mq = MessageQueue(topic, group, q)
        offsets[q] = 0
        while (r := await consumer.pull(mq, offsets[q], max_nums=32, timeout_s=3)).status is PullStatus.FOUND:
            offsets[q] = r.next_begin_offset

    async def first_consumed() -> float:
        while True:
            for q in range(queues):
                try:
                    r = await consumer.pull(MessageQueue(topic, group, q), offsets[q], max_nums=1, timeout_s=1)
                except Exception:  # noqa: BLE001 - the dead master or a switching one
                    await asyncio.sleep(0.01)
                    continue
                if r.status is PullStatus.FOUND:
                    return time.monotonic()

    await kill()
    killed_at = time.monotonic()
    consumed = asyncio.ensure_future(first_consumed())
    failed = 0
    try:
        while True:
            if time.monotonic() - killed_at > 60:
                raise TimeoutError("no SEND_OK within 60 s of the kill")
            try:
                result = await producer.send(Message(topic, b"after"))
                if result.status is SendStatus.SEND_OK:
                    break
            except Exception:  # noqa: BLE001 - counted: the route names the dead master, or a switch is under way
                pass
            failed += 1
            await asyncio.sleep(0.01)
        elapsed_ms = (time.monotonic() - killed_at) * 1000
        consumed_ms = (await asyncio.wait_for(consumed, 60) - killed_at) * 1000
    finally:
        consumed.cancel()
    return {"kill_to_send_ok_ms": round(elapsed_ms, 1), "kill_to_consumed_ms": round(consumed_ms, 1),
            "failed_attempts": failed}


async def one_run(workdir: Path, etcd_binary: str) -> dict:
    with EtcdServer(workdir / "etcd", binary=etcd_binary) as etcd, \
            controller_namesrv(workdir / "ns", etcd.endpoint) as ns:
        brokers = [controller_broker(workdir, ns, GROUP, i) for i in (1, 2, 3)]
        admin = await AdminClient(ns.addr).start()
        producer = await Producer("controller-failover-bench", ns.addr).start()
        consumer = await PullConsumer("controller-failover-bench", ns.addr).start()
        try:
            for b in brokers:
                b.start()
            deadline = time.monotonic() + 30
            while (await replica_info(ns, GROUP)).sync_state_set != {1, 2, 3}:
                if time.monotonic() > deadline:
                    raise TimeoutError("the SyncStateSet did not grow to three")
                await asyncio.sleep(0.1)
            await admin.update_topic(brokers[0].addr, TOPIC, read_queue_nums=2, write_queue_nums=2)
            for i in range(50):
                assert (await producer.send(Message(TOPIC, b"m%d" % i))).status is SendStatus.SEND_OK

            async def kill() -> None:
                brokers[0].kill()

            run = await measure(producer, consumer, TOPIC, GROUP, 2, kill)
            info = await replica_info(ns, GROUP)
            return {**run, "new_master": info.master_broker_id, "master_epoch": info.master_epoch}
        finally:
            await consumer.stop()
            await producer.stop()
            await admin.stop()
            for b in brokers:
                b.stop()


def summarize(title: str, runs: list[dict]) -> dict:
    print_table(title, ["run", "SEND_OK ms", "consumed ms", "failed sends", "new master", "masterEpoch"],
                [[i, r["kill_to_send_ok_ms"], r["kill_to_consumed_ms"], r["failed_attempts"], r["new_master"],
                  r["master_epoch"]] for i, r in enumerate(runs)])
    summary = {}
    for key in ("kill_to_send_ok_ms", "kill_to_consumed_ms"):
        times = [r[key] for r in runs]
        summary[key] = {"median_ms": median_of(times), "min_ms": min(times), "max_ms": max(times)}
        print(f"{key}: median {median_of(times):.0f} ms (min {min(times):.0f}, max {max(times):.0f})")
    return summary


async def main_async(args: argparse.Namespace) -> dict:
    binary, why = ensure_etcd()
    if binary is None:
        raise SystemExit(f"no etcd: {why}")
    root = Path(tempfile.mkdtemp(prefix="pyrmq-cfailover-", dir=args.tmp))
    runs = []
    try:
        for i in range(args.runs):
            runs.append(await one_run(root / f"run{i}", binary))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize("SIGKILL of a controller-mode master -> first SEND_OK on the elected one", runs)
    return {"args": vars(args), "runs": runs, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_failover_bench")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tmp", default=None, help="directory for the stores (default: system temp)")
    parser.add_argument("--compose", action="store_true",
                        help="measure on docker-compose.controller.yml's containers instead of local processes")
    parser.add_argument("--project", default=None, help="with --compose: a running project of that file to use")
    parser.add_argument("--net", default=None,
                        help="with --project: its PYRMQ_CONTROLLER_NET address prefix (default 10.157.0)")
    args = parser.parse_args(argv)
    if args.compose:
        from bench.controller_failover_compose import main_async as compose_main

        write_json("controller_failover_bench_compose", asyncio.run(compose_main(args)))
        return 0
    write_json("controller_failover_bench", asyncio.run(main_async(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
