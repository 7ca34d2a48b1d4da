"""Controller-mode failover: time from SIGKILL of a master to the first SEND_OK on the newly elected master.

Per run, real processes on 127.0.0.1: one etcd, a nameserver running the controller, a broker group of three
controller-mode brokers (heartbeat every 200 ms, controllerHeartBeatTimeoutMills 1.5 s; the SIGKILL closes the
master's controller connection, so the controller elects at once). The SDK producer sends SYNC to the group's only
topic; the master is SIGKILLed and the producer sends in a loop (each failure retried at once) until a SEND_OK.
Reported per run: that time, the failed attempts, and the new master's brokerId.
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
from client import AdminClient, Message, Producer, SendStatus
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
            brokers[0].kill()
            killed_at = time.monotonic()
            failed = 0
            while True:
                if time.monotonic() - killed_at > 60:
                    raise TimeoutError("no SEND_OK within 60 s of the kill")
                try:
                    result = await producer.send(Message(TOPIC, b"after"))
                    if result.status is SendStatus.SEND_OK:
                        break
                except Exception:  # noqa: BLE001 - counted: the route names the dead master, or a switch is under way
                    pass
                failed += 1
                await asyncio.sleep(0.01)
            elapsed_ms = (time.monotonic() - killed_at) * 1000
            info = await replica_info(ns, GROUP)
            return {"kill_to_send_ok_ms": round(elapsed_ms, 1), "failed_attempts": failed,
                    "new_master": info.master_broker_id, "master_epoch": info.master_epoch}
        finally:
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
    print_table("SIGKILL of a controller-mode master -> first SEND_OK on the elected one",
                ["run", "ms", "failed attempts", "new master", "masterEpoch"],
                [[i, r["kill_to_send_ok_ms"], r["failed_attempts"], r["new_master"], r["master_epoch"]]
                 for i, r in enumerate(runs)])
    times = [r["kill_to_send_ok_ms"] for r in runs]
    summary = {"median_ms": median_of(times), "min_ms": min(times), "max_ms": max(times)}
    print(f"median {summary['median_ms']:.0f} ms (min {summary['min_ms']:.0f}, max {summary['max_ms']:.0f})")
    return {"args": vars(args), "runs": runs, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_failover_bench")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tmp", default=None, help="directory for the stores (default: system temp)")
    args = parser.parse_args(argv)
    write_json("controller_failover_bench", asyncio.run(main_async(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
