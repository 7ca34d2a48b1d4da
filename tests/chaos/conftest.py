"""The chaos tier: real nameserver, master and slave processes under scheduled faults, judged by harness.checker.

A cluster per test (harness/procs.py processes; the slave in a network namespace and on a small tmpfs where
the machine allows it, see harness/chaos/cluster.py). The longer runs with random schedules are bench/chaos.py.
"""

from __future__ import annotations

import asyncio

import pytest

from harness.chaos.cluster import ChaosCluster, ClusterSpec
from harness.chaos.schedule import Fault, ScheduleResult, ScheduleRunner
from harness import procs


def summary(result: ScheduleResult) -> str:
    f = result.final
    faults = ", ".join(f"{r.kind} {r.hold_s:g}s" + (f" (skipped: {r.skipped})" if r.skipped else "")
                       for r in result.faults)
    return (f"{result.name} [{result.mode.value}] {result.duration_s:.0f}s, faults: {faults}; sends {f.attempted}: "
            f"acked {f.acked} weak {f.weak} failed {f.failed} unknown {f.unknown}; read {f.read} "
            f"(duplicated {f.duplicated}, recovered {f.recovered}); lost {len(f.lost)}, lost on the slave "
            f"{len(f.lost_on_slave)} ({len(f.lost_on_slave_below_ack)} below its ack {f.slave_ack}); "
            f"outcomes {result.outcomes}; notes {result.notes}; problems {result.problems}")


@pytest.fixture
def chaos(tmp_path):
    """``await chaos(spec, name, faults)`` -> ScheduleResult, on a fresh cluster (stopped at teardown)."""
    clusters: list[ChaosCluster] = []

    async def run(spec: ClusterSpec, name: str, faults: list[Fault], *, needs: tuple[str, ...] = ()) -> ScheduleResult:
        cluster = ChaosCluster(tmp_path / name, procs, spec)
        clusters.append(cluster)
        await asyncio.to_thread(cluster.start)
        missing = [cluster.skipped[k] for k in needs if k in cluster.skipped]
        if missing:
            pytest.skip("; ".join(missing))
        result = await ScheduleRunner(cluster, name).run(faults)
        print(summary(result))
        return result

    yield run
    for cluster in clusters:
        cluster.stop()
