"""A controller-mode cluster as real processes: a nameserver running the controller (``enableControllerInNamesrv``)
on one etcd, and broker groups of controller-mode brokers (``enableControllerMode``) whose roles the controller
decides. Fast timings for tests and benches: heartbeats every 200 ms, a silent broker dead after 1.5 s."""

from __future__ import annotations

from pathlib import Path

from controller.client import ControllerClient, ReplicaInfo
from harness.controller import FAST
from harness.procs import Broker, Namesrv

BROKER_FAST = {
    "controllerHeartBeatTimeoutMills": 1500,
    "brokerHeartbeatInterval": 200,
    "checkSyncStateSetPeriod": 200,
    "controllerFenceMarginMills": 500,
    "slaveSynchronizeInterval": 500,
    "slaveTimeout": 1500,
}


def controller_namesrv(workdir: Path, etcd_endpoint: str, **conf: object) -> Namesrv:
    return Namesrv(workdir, enableControllerInNamesrv=True, controllerStoreEtcdEndpoints=etcd_endpoint,
                   controllerInstanceId="ns-controller", **{**FAST, **conf})


def controller_broker(workdir: Path, ns: Namesrv, name: str, index: int, **conf: object) -> Broker:
    """Broker ``index`` of group ``name`` (its id comes from the controller; ``index`` only names its files)."""
    values = {"enableControllerMode": True, "controllerAddr": ns.addr, **BROKER_FAST, **conf}
    return Broker(workdir / f"{name}-{index}", name=name, namesrv_addr=ns.addr, broker_id=index, **values)


async def replica_info(ns: Namesrv, name: str) -> ReplicaInfo:
    client = ControllerClient([ns.addr])
    try:
        return await client.replica_info(name)
    finally:
        await client.close()


def sync_state_set_is(ns: Namesrv, name: str, members: set[int]):
    """A condition for ``async_wait_until``: the group's SyncStateSet is ``members``."""

    async def check() -> bool:
        return (await replica_info(ns, name)).sync_state_set == members

    return check


def commitlog_bytes(broker: Broker) -> bytes:
    """The broker's whole commitlog as written (trailing zeros of the last file dropped)."""
    files = sorted(f for f in (broker.store_dir / "commitlog").iterdir() if f.name.isdigit())
    return b"".join(f.read_bytes() for f in files).rstrip(b"\0")


def log_differences(master: Broker, others: list[Broker]) -> str:
    want = commitlog_bytes(master)
    out = []
    for b in others:
        got = commitlog_bytes(b)
        first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        out.append(f"{b.addr}: {len(got)} bytes vs {len(want)}, first difference at {first}")
    return "; ".join(out)
