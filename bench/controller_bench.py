"""Controller mode, controller side: how fast the controller replaces a dead active instance and a dead master.

Real processes on 127.0.0.1: one etcd (Debian's etcd-server), two controller instances with their default timings
(lease TTL 3 s, scan every 5 s, heartbeat timeout 10 s unless ``--heartbeat-timeout-ms``), and wire-level broker
drivers (harness.controller.BrokerDriver) heartbeating every 200 ms. Per run:

- ``active_ms``: SIGKILL of the active controller -> the standby answers GET_METADATA_INFO as the active one
  (bounded by the lease TTL plus the standby's 0.5 s poll);
- ``closed_ms``: a group's master closes its connection (a killed process whose kernel resets the socket) -> its
  SyncStateSet member is master in GET_REPLICA_INFO (RocketMQ's channel-close path: no timeout to wait);
- ``silent_ms``: a master stops heartbeating with its connection open (power loss, partition, SIGSTOP) -> new
  master (heartbeat timeout + at most one scan).

Brokers themselves (role change, re-registration with the nameserver, clients' route refresh) are not in these
figures: the broker side of controller mode is not built yet.
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
from controller.client import ControllerClient
from harness.controller import BrokerDriver, Controller
from harness.etcd import EtcdServer, ensure_etcd
from harness.procs import free_port
from remoting.codes import ResponseCode as RC


async def _until(condition, timeout_s: float, what: str, every_s: float = 0.01) -> float:
    """Seconds until ``condition()`` (a coroutine function) is true."""
    t0 = time.monotonic()
    while not await condition():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"after {timeout_s:.0f}s: {what}")
        await asyncio.sleep(every_s)
    return time.monotonic() - t0


async def _is_active(client: ControllerClient, addr: str) -> bool:
    try:
        return (await client.metadata(addr)).get("isLeader") == "true"
    except Exception:  # noqa: BLE001 - a killed instance answers nothing
        return False


async def _group(addrs: list[str], name: str, timeout_ms: int) -> list[BrokerDriver]:
    brokers = [BrokerDriver(addrs, "bench", name, f"127.0.0.1:{free_port()}", heartbeat_timeout_ms=timeout_ms)
               for _ in range(3)]
    for b in brokers:
        await b.join()
        b.start_heartbeats()
    await asyncio.sleep(0.5)
    resp = await brokers[0].elect()
    assert resp.code == RC.SUCCESS, resp.remark
    resp = await brokers[0].alter({1, 2}, master_epoch=1, sss_epoch=1)
    assert resp.code == RC.SUCCESS, resp.remark
    return brokers


async def _master_is(driver: BrokerDriver, broker_id: int) -> bool:
    resp, _ = await driver.replica_info()
    return resp.code == RC.SUCCESS and resp.ext.get("masterBrokerId") == str(broker_id)


async def one_run(i: int, controllers: list[Controller], timeout_ms: int) -> dict:
    addrs = [c.addr for c in controllers]
    probe = ControllerClient(addrs)
    try:
        await _until(lambda: _any_active(probe, controllers), 30, "an active controller", 0.1)
        active = [c for c in controllers if await _is_active(probe, c.addr)][0]
        standby = next(c for c in controllers if c is not active)
        # give the new active one its post-takeover grace (one heartbeat timeout) before groups depend on it
        closed_group = await _group(addrs, f"closed-{i}", timeout_ms)
        silent_group = await _group(addrs, f"silent-{i}", timeout_ms)
        await closed_group[0].close()
        closed_s = await _until(lambda: _master_is(closed_group[1], 2), 60, "the closed master replaced")
        await silent_group[0].stop_heartbeats()
        silent_s = await _until(lambda: _master_is(silent_group[1], 2), 120, "the silent master replaced")
        for b in closed_group[1:] + silent_group:
            await b.close()
        active.kill()
        active_s = await _until(lambda: _is_active(probe, standby.addr), 60, "the standby active", 0.02)
        await asyncio.to_thread(active.start)
        return {"run": i, "active_ms": active_s * 1000, "closed_ms": closed_s * 1000, "silent_ms": silent_s * 1000}
    finally:
        await probe.close()


async def _any_active(probe: ControllerClient, controllers: list[Controller]) -> bool:
    return any([await _is_active(probe, c.addr) for c in controllers])


async def main_async(args: argparse.Namespace) -> dict:
    binary, why = ensure_etcd()
    if binary is None:
        raise SystemExit(f"controller_bench: {why}")
    root = Path(tempfile.mkdtemp(prefix="pyrmq-controller-bench-", dir=args.tmp))
    etcd = EtcdServer(root / "etcd", binary=binary).start()
    conf = {"controllerHeartBeatTimeoutMills": args.heartbeat_timeout_ms}
    controllers = [Controller(root / "ctl", etcd.endpoint, name=f"c{n}", **conf) for n in (1, 2)]
    runs = []
    try:
        for c in controllers:
            c.start()
        for i in range(args.runs):
            runs.append(await one_run(i, controllers, args.heartbeat_timeout_ms))
    finally:
        for c in controllers:
            c.stop()
        etcd.stop()
        shutil.rmtree(root, ignore_errors=True)
    print_table(
        f"controller: SIGKILL of the active instance, a master's closed connection, a silent master "
        f"(lease ttl 3 s, scan 5 s, heartbeat timeout {args.heartbeat_timeout_ms} ms)",
        ["run", "active ms", "closed ms", "silent ms"],
        [[r["run"], r["active_ms"], r["closed_ms"], r["silent_ms"]] for r in runs],
    )
    summary = {}
    for key in ("active_ms", "closed_ms", "silent_ms"):
        values = [r[key] for r in runs]
        summary[key] = {"median": median_of(values), "max": max(values)}
    print("medians: " + ", ".join(f"{k} {v['median']:.0f} (max {v['max']:.0f})" for k, v in summary.items()))
    return {"args": vars(args), "runs": runs, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_bench")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=10_000,
                        help="controllerHeartBeatTimeoutMills of the drivers and the controllers")
    parser.add_argument("--tmp", default=None, help="directory for etcd and the logs (default: system temp)")
    args = parser.parse_args(argv)
    write_json("controller_bench", asyncio.run(main_async(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
