"""SYNC produce throughput of a controller-mode group against a classic SYNC_MASTER group, as a ratio (issue 23: >= 0.9).

One run, real processes on 127.0.0.1, both groups up at once so they share the machine's state:

- classic: a nameserver, a SYNC_MASTER and its SLAVE (SEND_OK once the slave acked);
- controller: one etcd, a nameserver running the controller, two controller-mode brokers whose SyncStateSet is
  both (``allAckInSyncStateSet=true``: SEND_OK once the other member acked). The same two replicas, the same wait,
  the brokers' default timings (heartbeat every 1 s, slave metadata round every 10 s).

Rounds are interleaved (classic, controller, then controller, classic, ...) so a neighbour's load spreads over
both; each round sends ``--concurrency`` SDK sends of ``--body`` bytes in a loop for ``--seconds`` and counts
SEND_OK. Per round also the master's CPU microseconds per message (from /proc), which a busy neighbour moves much
less than the wall-clock rate. Reported: medians of the rounds and the ratios controller / classic.

Usage: ``python -m bench.controller_throughput_bench [--rounds 6] [--seconds 3]``; writes
``bench/results/controller_throughput_bench.json``. Never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.cpu import cpu_s, settle
from bench.report import median_of, print_table, write_json
from client import AdminClient, Message, Producer, SendStatus
from harness.controller_mode import controller_broker, controller_namesrv, replica_info
from harness.etcd import EtcdServer, ensure_etcd
from harness.procs import Broker, Namesrv
from harness.waiting import async_wait_until

TOPIC = "ThroughputBench"
FILE = 64 * 1024 * 1024
# the brokers' own defaults: harness.controller_mode's fast test timings (heartbeats every 200 ms, a slave metadata
# round every 500 ms) would charge controller mode for traffic a deployment does not have
DEFAULT_TIMINGS = {"controllerHeartBeatTimeoutMills": 10_000, "brokerHeartbeatInterval": 1000,
                   "checkSyncStateSetPeriod": 5000, "controllerFenceMarginMills": 1000,
                   "slaveSynchronizeInterval": 10_000, "slaveTimeout": 3000}


async def _round(producer: Producer, body: bytes, concurrency: int, seconds: float, master_pid: int) -> dict:
    ok = failed = 0
    stop_at = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal ok, failed
        while time.monotonic() < stop_at:
            try:
                r = await producer.send(Message(TOPIC, body))
                if r.status is SendStatus.SEND_OK:
                    ok += 1
                else:
                    failed += 1
            except Exception:  # noqa: BLE001 - counted
                failed += 1

    cpu0, t0 = cpu_s(master_pid), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.monotonic() - t0, cpu_s(master_pid) - cpu0
    return {"msgs_per_s": ok / wall, "sent": ok, "failed": failed,
            "master_cpu_us_per_msg": cpu * 1e6 / ok if ok else None}


async def main_async(args: argparse.Namespace) -> dict:
    binary, why = ensure_etcd()
    if binary is None:
        raise SystemExit(f"no etcd: {why}")
    root = Path(tempfile.mkdtemp(prefix="pyrmq-cthroughput-", dir=args.tmp))
    common = {"mappedFileSizeCommitLog": FILE, "flushDiskType": "ASYNC_FLUSH", "metricsExporterType": "DISABLE"}
    try:
        with EtcdServer(root / "etcd", binary=binary) as etcd, \
                controller_namesrv(root / "cns", etcd.endpoint) as cns, Namesrv(root / "ns") as ns:
            cm = Broker(root / "classic-m", name="broker-classic", namesrv_addr=ns.addr, role="SYNC_MASTER", **common)
            cs = Broker(root / "classic-s", name="broker-classic", namesrv_addr=ns.addr, role="SLAVE", broker_id=1,
                        haMasterAddress=cm.ha_addr, **common)
            ctl = [controller_broker(root, cns, "broker-ctl", i, **common, **DEFAULT_TIMINGS) for i in (1, 2)]
            procs = [cm, cs, *ctl]
            admin = await AdminClient(ns.addr).start()
            cadmin = await AdminClient(cns.addr).start()
            producers = {"classic": await Producer("tp-classic", ns.addr).start(),
                         "controller": await Producer("tp-controller", cns.addr).start()}
            try:
                for p in procs:
                    p.start(60)

                async def whole_set() -> bool:
                    return (await replica_info(cns, "broker-ctl")).sync_state_set == {1, 2}

                await async_wait_until(whole_set, 60, "the controller group's SyncStateSet to hold both brokers")
                info = await replica_info(cns, "broker-ctl")
                master = next(b for b in ctl if b.addr == info.master_address)
                await admin.update_topic(cm.addr, TOPIC, read_queue_nums=4, write_queue_nums=4)
                await cadmin.update_topic(master.addr, TOPIC, read_queue_nums=4, write_queue_nums=4)
                body = b"x" * args.body
                pids = {"classic": cm.pid, "controller": master.pid}
                for name, producer in producers.items():  # warm up: routes, connections, slave links
                    await async_wait_until(lambda p=producer: _sends(p, body), 60, f"a SEND_OK from the {name} group")
                    await _round(producer, body, args.concurrency, 1.0, pids[name])
                await settle(*(p.pid for p in procs), limit_s=20)
                rounds: dict[str, list[dict]] = {"classic": [], "controller": []}
                for i in range(args.rounds):
                    order = ("classic", "controller") if i % 2 == 0 else ("controller", "classic")
                    for name in order:
                        rounds[name].append(await _round(producers[name], body, args.concurrency, args.seconds,
                                                         pids[name]))
            finally:
                for producer in producers.values():
                    await producer.stop()
                await admin.stop()
                await cadmin.stop()
                for p in reversed(procs):
                    p.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rows, summary = [], {}
    for name, samples in rounds.items():
        rate = median_of([s["msgs_per_s"] for s in samples])
        cpu = median_of([s["master_cpu_us_per_msg"] for s in samples if s["master_cpu_us_per_msg"]])
        spread = (min(s["msgs_per_s"] for s in samples), max(s["msgs_per_s"] for s in samples))
        summary[name] = {"median_msgs_per_s": rate, "min_msgs_per_s": spread[0], "max_msgs_per_s": spread[1],
                         "median_master_cpu_us_per_msg": cpu,
                         "failed": sum(s["failed"] for s in samples)}
        rows.append([name, round(rate), f"{spread[0]:.0f}-{spread[1]:.0f}", round(cpu, 1),
                     summary[name]["failed"]])
    ratio = summary["controller"]["median_msgs_per_s"] / summary["classic"]["median_msgs_per_s"]
    per_round = [c["msgs_per_s"] / k["msgs_per_s"] for c, k in zip(rounds["controller"], rounds["classic"],
                                                                       strict=True)]
    cpu_ratio = summary["controller"]["median_master_cpu_us_per_msg"] / summary["classic"][
        "median_master_cpu_us_per_msg"]
    print_table(f"SYNC sends, {args.concurrency} in flight, {args.body} B, {args.rounds} interleaved rounds of "
                f"{args.seconds:g} s", ["group", "median msg/s", "min-max", "master CPU us/msg", "failed"], rows)
    print(f"throughput ratio controller / classic: {ratio:.2f} (per round pair: "
          f"{', '.join(f'{r:.2f}' for r in per_round)}); master CPU per message ratio {cpu_ratio:.2f}")
    return {"args": vars(args), "rounds": rounds, "summary": summary, "throughput_ratio": ratio,
            "per_round_ratios": per_round, "master_cpu_per_msg_ratio": cpu_ratio}


async def _sends(producer: Producer, body: bytes) -> bool:
    try:
        return (await producer.send(Message(TOPIC, body))).status is SendStatus.SEND_OK
    except Exception:  # noqa: BLE001 - routes still arriving
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_throughput_bench")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--tmp", default=None, help="directory for the stores (default: system temp)")
    parser.add_argument("--json-name", default="controller_throughput_bench")
    args = parser.parse_args(argv)
    write_json(args.json_name, asyncio.run(main_async(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
