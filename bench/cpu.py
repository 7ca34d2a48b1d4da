"""CPU accounting for the benchmarks: the broker's cost per message is its CPU time, read from /proc, over the
messages of a run, and a run starts only once the processes it measures have finished their boot-time work."""

from __future__ import annotations

import asyncio
import os
import time

_TICKS = os.sysconf("SC_CLK_TCK")


def stat_cpu_s(stat_path: str) -> float:
    """utime + stime (seconds) from a /proc ``stat`` file (a process's, or a thread's under task/)."""
    with open(stat_path) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / _TICKS


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds process ``pid`` (this one by default) has used so far."""
    return stat_cpu_s(f"/proc/{pid or os.getpid()}/stat")


def runq_wait_s(pid: int) -> float:
    """Seconds the threads of process ``pid`` spent runnable but waiting for a CPU (the second field of each
    thread's /proc schedstat; 0 where the kernel keeps no schedstats). Tells a pipeline bubble (every process
    waits on another: cores idle, no run-queue wait) from contention (processes wait for a core)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


async def settle(*pids: int, idle_cores: float = 0.05, window_s: float = 0.5, limit_s: float = 30.0) -> float:
    """Wait until every process in ``pids`` uses under ``idle_cores`` of CPU over ``window_s``; returns the
    seconds waited (at most ``limit_s``).

    Why: a fresh broker's boot-time work (file creation; with warmMappedFileEnable=true also the pre-touch of
    its commitlog files, ~2.5 s of CPU per GiB) would otherwise land in the first measured run.
    """
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        before = [cpu_s(p) for p in pids]
        await asyncio.sleep(window_s)
        if all((cpu_s(p) - c) / window_s < idle_cores for p, c in zip(pids, before, strict=True)):
            break
    return time.monotonic() - started
