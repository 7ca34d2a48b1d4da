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
from pathlib import Path

from bench.failover_measure import measure, summarize
from bench.report import write_json
from client import AdminClient, Message, Producer, PullConsumer, SendStatus
from harness.controller_mode import controller_broker, controller_namesrv, replica_info
from harness.etcd import EtcdServer, ensure_etcd

TOPIC = "ControllerFailoverBench"
GROUP = "broker-cf"


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
