"""SIGKILL of a controller-mode master -> the first SEND_OK on the new master, per client: the pyrmq SDK (route
refreshed on the failed send), Apache's C++ client (PyPI ``rocketmq`` 0.4.4) and the official RocketMQ 5 client
(``rocketmq-python-client`` 5.1.2, the v2 endpoint), both of which learn routes by their 30 s poll.

Per run and client a fresh ``harness.client_failover.ControllerGroup`` (one etcd, a nameserver running the
controller, three controller-mode brokers with a 1.5 s heartbeat timeout; the SIGKILL closes the master's connection,
so the controller elects at once). The client sends SYNC to the group's only topic, one message at a time, retrying a
failed send after 50 ms; reported: the time from the kill to its first SEND_OK, and how many sends failed meanwhile.
Where in its 30 s poll period a RocketMQ client is when the master dies is chance, so its figures spread over 0-30 s:
run i of n kills the master 12 s + (i + 0.5) / n x 30 s after the client started (past the early polls, C++ at 3 s
and v2 at 10 s, and spread evenly over the steady period), the same for every client. Wall-clock times on a shared
2-core VM: noisy.
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
from client import Message, Producer, SendStatus
from harness.checker import Outcome
from harness.client_failover import ControllerGroup, SendLog
from harness.etcd import ensure_etcd
from harness.rocketmq5 import Rmq5Client, client_python

TOPIC = "ClientFailoverBench"
LIMIT_S = 120.0
WARM = 10
POLL_S = 30.0  # RocketMQ clients' route poll period
FIRST_POLLS_S = 12.0  # past their early polls (C++: 3 s after start; v2: 10 s), into the steady 30 s period


def measure(g: ControllerGroup, send, settle_s: float) -> dict:
    """SEND_OKs every 0.1 s for ``settle_s`` (at least WARM), the kill, sends until one SEND_OK; ``send(ident)``
    raises on failure."""
    log = SendLog()
    kill_at = time.monotonic() + settle_s
    while len(log.sends) < WARM or time.monotonic() < kill_at:
        ident = log.next_id()
        send(ident)
        log.ok(ident)
        time.sleep(0.1)
    _, log.killed_at = g.kill_master()
    while log.first_ok_after_kill is None:
        if time.monotonic() - log.killed_at > LIMIT_S:
            raise TimeoutError(f"no SEND_OK within {LIMIT_S} s of the kill")
        ident = log.next_id()
        try:
            send(ident)
        except Exception as exc:  # noqa: BLE001 - counted
            log.unknown(ident, str(exc))
            time.sleep(0.05)
            continue
        log.ok(ident)
    errors = [s.detail for s in log.sends if s.outcome is Outcome.UNKNOWN]
    return {"kill_to_send_ok_ms": round(log.kill_to_send_ok_s * 1000, 1), "failed_sends": log.failed_after_kill,
            "new_master": g.info().master_broker_id, "first_error": errors[0] if errors else ""}


def run_sdk(g: ControllerGroup, settle_s: float) -> dict:
    async def main() -> dict:
        loop = asyncio.get_running_loop()
        async with Producer("bench-sdk", g.namesrv_addr, send_timeout_s=10.0) as producer:

            async def one(ident: str) -> SendStatus:
                return (await producer.send(Message(TOPIC, ident.encode()))).status

            def send(ident: str) -> None:  # measure() runs in a thread: the producer stays on its loop
                status = asyncio.run_coroutine_threadsafe(one(ident), loop).result()
                if status is not SendStatus.SEND_OK:
                    raise RuntimeError(status.name)

            result = await loop.run_in_executor(None, measure, g, send, settle_s)
            result["route_refreshes_on_demand"] = producer.routes.stats.on_demand
            result["route_polls"] = producer.routes.stats.polled
            return result

    return asyncio.run(main())


def run_cpp(g: ControllerGroup, home: Path, settle_s: float) -> dict:
    from rocketmq.client import SendStatus as CppStatus

    from tests.compat.harness import CppProducer

    producer = CppProducer(g.namesrv_addr, home, group=f"bench_cpp_{time.monotonic_ns()}")
    try:
        def send(ident: str) -> None:
            if producer.send(TOPIC, ident, "T", ident).status != CppStatus.OK:
                raise RuntimeError("not OK")

        return measure(g, send, settle_s)
    finally:
        producer.shutdown()


def run_rmq5(g: ControllerGroup, python: str, home: Path, settle_s: float) -> dict:
    client = Rmq5Client(python, home)
    try:
        client.call(op="producer", endpoint=g.access_point(), topics=[TOPIC])
        return measure(g, lambda ident: client.call(timeout_s=60, op="send", topic=TOPIC, body=ident), settle_s)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_failover_bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", default="sdk,cpp,rmq5")
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args(argv)
    etcd, why = ensure_etcd()
    if etcd is None:
        raise SystemExit(f"no etcd: {why}")
    clients = args.clients.split(",")
    python5 = client_python() if "rmq5" in clients else ""
    root = Path(tempfile.mkdtemp(prefix="pyrmq-client-failover-", dir=args.tmp))
    rows, runs = [], []
    try:
        for i in range(args.runs):
            for name in clients:
                work = root / f"{name}-{i}"
                with ControllerGroup(work, etcd) as g:
                    g.create_topic(TOPIC, 2)
                    settle = FIRST_POLLS_S + (i + 0.5) / args.runs * POLL_S  # spread over the poll period
                    if name == "sdk":
                        r = run_sdk(g, settle)
                    elif name == "cpp":
                        r = run_cpp(g, work / "cpp-home", settle)
                    else:
                        r = run_rmq5(g, python5, work / "rmq5-home", settle)
                r = {"client": name, "run": i, "killed_after_s": round(settle, 1), **r}
                print(r, flush=True)
                runs.append(r)
                rows.append([name, i, r["kill_to_send_ok_ms"], r["failed_sends"], r["new_master"]])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table("SIGKILL of a controller-mode master -> first SEND_OK on the new master",
                ["client", "run", "SEND_OK ms", "failed sends", "new master"], rows)
    summary = {}
    for name in clients:
        times = [r["kill_to_send_ok_ms"] for r in runs if r["client"] == name]
        summary[name] = {"median_ms": median_of(times), "min_ms": min(times), "max_ms": max(times), "runs": len(times)}
        print(f"{name}: median {median_of(times):.0f} ms (min {min(times):.0f}, max {max(times):.0f})")
    if "sdk" in summary:
        for name in clients:
            if name != "sdk":
                ratio = summary[name]["median_ms"] / summary["sdk"]["median_ms"]
                print(f"{name} / sdk (medians, one run): {ratio:.1f}x")
    write_json("client_failover_bench", {"args": vars(args), "runs": runs, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
