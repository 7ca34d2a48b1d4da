"""One chaos schedule: load, a sequence of faults, heal and drain, destroy the master under load, drain the slave,
check (spec/reliability.md §5 and §8).

1. The topic is created on the master and the slave has synced it and is in sync (HA status OK).
2. Writers and readers start (``workload``); once some sends are acked, each fault in turn is injected, held for
   its time, healed, and followed by a recovery: the slave back in sync, then acked sends again (both waited for
   as facts, bounded; a recovery that does not come is noted, the schedule goes on).
3. Writers stop, everything is healed, and the group must read every message acked so far from the live master
   (first check: nothing acked is lost in either mode).
4. Writers start again; with load on, the slave is cut off (HA partition, else paused) for a moment, its acked
   offset is recorded from the master's HA status (GET_BROKER_HA_STATUS through client/admin.py) and the master
   is SIGKILLed for good, as if its disk were gone (F5 after N1: spec N1k). The slave alone is drained (second
   check, ``harness.checker``): SYNC, every SEND_OK is on the slave; ASYNC, whatever is missing lies beyond the
   recorded acked offset (and some is: what the master acked while the slave was cut off).

Each fault also records the slave's acked offset and the master's max offset when it started. Holding a fault
for its time is the schedule itself, not a wait for something to happen; every wait for a state is bounded.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from client import AdminClient, MQClientError
from harness.chaos.cluster import BOOT_S, ChaosCluster
from harness.chaos.workload import Ledger, Readers, Writers, drain_node
from harness.checker import Mode, Report, check

FAULT_KINDS = ("kill-master", "restart-master", "pause-master", "kill-slave", "restart-slave", "pause-slave",
               "partition-ha", "disk-full-slave")
QUEUES = 4
RECOVERY_S = 45.0  # slave back in sync after a fault was healed
LOAD_HELD_ACKS = 30  # acked sends after a heal that show the load is held again
ADMIN_TIMEOUT_S = 3.0
DESTROY_LAG_S = 2.0  # the slave is cut off this long before the master is destroyed


@dataclass(frozen=True)
class Fault:
    kind: str
    hold_s: float = 4.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; one of {', '.join(FAULT_KINDS)}")


@dataclass
class FaultRecord:
    kind: str
    hold_s: float
    at_s: float  # since the load started
    slave_ack: int | None  # the slave's acked offset when the fault started (None: the master did not answer)
    master_max: int | None
    skipped: str = ""
    acked_during: int = 0
    in_sync_after_s: float | None = None  # heal -> the slave in sync again (None: not within RECOVERY_S)
    load_held_after_s: float | None = None  # heal -> LOAD_HELD_ACKS more acked sends


@dataclass
class ScheduleResult:
    name: str
    mode: Mode
    faults: list[FaultRecord]
    drained: Report  # step 3: the group's reads of the live master
    final: Report  # step 4: with the slave drained after the master was destroyed
    problems: list[str]
    notes: list[str] = field(default_factory=list)  # liveness: what did not recover in time
    duration_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)  # send status or error type -> sends
    destroyed_behind: int | None = None  # bytes the slave's ack was behind the master's max at the destroy

    def figures(self) -> dict[str, Any]:
        return {"name": self.name, "mode": self.mode.value, "duration_s": round(self.duration_s, 1),
                "faults": [vars(f) for f in self.faults], "drained": self.drained.figures(),
                "final": self.final.figures(), "outcomes": self.outcomes,
                "destroyed_behind": self.destroyed_behind, "problems": self.problems, "notes": self.notes}


def random_faults(rng: random.Random, count: int, kinds: tuple[str, ...] = FAULT_KINDS,
                  hold_s: tuple[float, float] = (2.0, 8.0)) -> list[Fault]:
    return [Fault(rng.choice(kinds), round(rng.uniform(*hold_s), 1)) for _ in range(count)]


async def bounded(coro, timeout_s: float = ADMIN_TIMEOUT_S):
    """The answer of an admin call, or None when it failed or took longer than ``timeout_s``."""
    try:
        return await asyncio.wait_for(coro, timeout_s)
    except (MQClientError, TimeoutError, OSError):
        return None


async def wait_for_fact(predicate, timeout_s: float, interval_s: float = 0.2) -> float | None:
    """Seconds until ``predicate()`` (sync or async) was true, or None when ``timeout_s`` passed first."""
    t0 = time.monotonic()
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return time.monotonic() - t0
        if time.monotonic() - t0 >= timeout_s:
            return None
        await asyncio.sleep(interval_s)


class ScheduleRunner:
    def __init__(self, cluster: ChaosCluster, name: str, *, writers: int = 2, rate: float = 60.0,
                 drain_timeout_s: float = 90.0) -> None:
        self.cluster = cluster
        self.name = name
        self.mode = cluster.spec.mode
        self.topic = f"chaos_{name}"
        self.group = f"chaos-{name}"
        self.n_writers = writers
        self.rate = rate
        self.drain_timeout_s = drain_timeout_s
        self.ledger = Ledger()
        self.admin = AdminClient(cluster.namesrv_addr, timeout_s=ADMIN_TIMEOUT_S)
        self.notes: list[str] = []
        self.t0 = 0.0
        self.destroyed_behind: int | None = None  # master max - slave ack when the master was destroyed

    # facts ------------------------------------------------------------------------------------------------
    async def ha(self):
        return await bounded(self.admin.ha_status(self.cluster.master_addr))

    async def slave_in_sync(self) -> bool:
        status = await self.ha()
        return status is not None and any(s.state == "OK" for s in status.slaves)

    async def slave_knows_topic(self) -> bool:
        configs = await bounded(self.admin.all_topic_configs(self.cluster.slave_addr))
        return configs is not None and any(t.topic_name == self.topic for t in configs.topic_configs)

    async def drained(self) -> bool:
        if self.ledger.unread_acked():
            return False
        for q in range(QUEUES):
            rng = await bounded(self.admin.queue_offsets(self.cluster.master_addr, self.topic, q))
            if rng is None or self.ledger.max_read_offset.get(f"{self.topic}:{q}", -1) + 1 < rng.max_offset:
                return False
        return True

    async def slave_dispatched(self) -> bool:
        info = await bounded(self.admin.broker_runtime_info(self.cluster.slave_addr))
        return info is not None and info.get("dispatchBehindBytes") == "0"

    async def require(self, predicate, timeout_s: float, what: str) -> None:
        if await wait_for_fact(predicate, timeout_s) is None:
            raise TimeoutError(f"schedule {self.name}: {what} not within {timeout_s:.0f} s")

    # faults -----------------------------------------------------------------------------------------------
    def _inject(self, kind: str) -> None:
        c = self.cluster
        what, _, node = kind.partition("-")
        if kind == "partition-ha":
            c.partition_ha()
        elif kind == "disk-full-slave":
            c.fill_slave_disk()
        elif what == "kill":
            c.node(node).kill()
        elif what == "restart":
            c.node(node).stop()
        elif what == "pause":
            c.node(node).pause()

    def _heal(self, kind: str) -> None:
        c = self.cluster
        what, _, node = kind.partition("-")
        if kind == "partition-ha":
            c.heal_ha()
        elif kind == "disk-full-slave":
            c.free_slave_disk()
        elif what in ("kill", "restart"):
            c.node(node).start(BOOT_S)
        elif what == "pause":
            c.node(node).resume()

    async def fault(self, fault: Fault) -> FaultRecord:
        status = await self.ha()
        ack = max((s.ack_offset for s in status.slaves), default=None) if status else None
        rec = FaultRecord(fault.kind, fault.hold_s, round(time.monotonic() - self.t0, 1), ack,
                          status.commitlog_max_offset if status else None)
        skipped = self.cluster.skipped.get(fault.kind)
        if skipped:
            rec.skipped = skipped
            return rec
        start = time.monotonic()
        await asyncio.to_thread(self._inject, fault.kind)
        await asyncio.sleep(fault.hold_s)  # the fault's duration (the schedule), not a wait for a state
        await asyncio.to_thread(self._heal, fault.kind)
        healed = time.monotonic()
        rec.acked_during = self.ledger.acked_since(start) - self.ledger.acked_since(healed)
        rec.in_sync_after_s = await wait_for_fact(self.slave_in_sync, RECOVERY_S)
        if rec.in_sync_after_s is None:
            self.notes.append(f"{fault.kind} at {rec.at_s}s: the slave was not in sync {RECOVERY_S:.0f} s after the heal")
        rec.load_held_after_s = await wait_for_fact(lambda: self.ledger.acked_since(healed) >= LOAD_HELD_ACKS, RECOVERY_S)
        if rec.load_held_after_s is None:
            self.notes.append(f"{fault.kind} at {rec.at_s}s: fewer than {LOAD_HELD_ACKS} acked sends "
                              f"{RECOVERY_S:.0f} s after the heal")
        return rec

    # the schedule -----------------------------------------------------------------------------------------
    async def run(self, faults: list[Fault]) -> ScheduleResult:
        started = time.monotonic()
        await self.admin.start()
        readers = None
        try:
            await self.admin.update_topic(self.cluster.master_addr, self.topic, read_queue_nums=QUEUES,
                                          write_queue_nums=QUEUES)
            await self.require(self.slave_knows_topic, 30, f"the slave syncing topic {self.topic}")
            await self.require(self.slave_in_sync, 30, "the slave in sync with the master")
            readers = Readers(self.cluster.namesrv_addr, self.topic, self.group, self.ledger)
            await readers.start()
            writers = Writers(self.cluster.namesrv_addr, self.topic, self.ledger, writers=self.n_writers,
                              rate=self.rate, tag="w")
            self.t0 = time.monotonic()
            writers.start()
            await self.require(lambda: len(self.ledger.acked_at) >= LOAD_HELD_ACKS, 30, "acked sends under load")
            records = [await self.fault(f) for f in faults]
            await writers.stop()
            await asyncio.to_thread(self.cluster.heal_all)
            await self.require(self.slave_in_sync, RECOVERY_S, "the slave in sync after the last heal")
            before_destroy = list(self.ledger.sends.values())
            if await wait_for_fact(self.drained, self.drain_timeout_s) is None:
                self.notes.append(f"the group had not read every acked message {self.drain_timeout_s:.0f} s "
                                  "after the heal")
            drained = check(before_destroy, list(self.ledger.reads))
            final = await self.destroy_master_under_load(readers)
            readers = None
        finally:
            if readers is not None:
                await readers.stop()
            await self.admin.stop()
        problems = [f"drain from the live master: {p}" for p in drained.problems(self.mode)]
        problems += [f"after the master was destroyed: {p}" for p in final.problems(self.mode)]
        outcomes = Counter(s.detail for s in self.ledger.sends.values())
        return ScheduleResult(self.name, self.mode, records, drained, final, problems, self.notes,
                              time.monotonic() - started, dict(outcomes.most_common()), self.destroyed_behind)

    async def destroy_master_under_load(self, readers: Readers) -> Report:
        writers = Writers(self.cluster.namesrv_addr, self.topic, self.ledger, writers=self.n_writers,
                          rate=self.rate, tag="d")
        t = time.monotonic()
        writers.start()
        try:
            await self.require(lambda: self.ledger.acked_since(t) >= LOAD_HELD_ACKS, 30,
                               "acked sends before the master is destroyed")
            await readers.stop()
            # N1k: cut the slave off first, so the master is destroyed with a backlog the slave never got (ASYNC
            # acks it, SYNC must not); the HA partition where there is one, else a paused slave
            cut = "partition-ha" if "partition-ha" not in self.cluster.skipped else "pause-slave"
            await asyncio.to_thread(self._inject, cut)
            await asyncio.sleep(DESTROY_LAG_S)  # how long the slave falls behind: the schedule, not a wait
            status = await self.ha()
            ack = max((s.ack_offset for s in status.slaves), default=None) if status else None
            await asyncio.to_thread(self.cluster.master.kill)
            self.destroyed_behind = (status.commitlog_max_offset - ack) if status and ack is not None else None
            await asyncio.to_thread(self.cluster.heal_ha if cut == "partition-ha" else self.cluster.slave.resume)
        finally:
            await writers.stop()
        await self.require(self.slave_dispatched, 30, "the slave dispatching its whole commitlog")
        drain = await drain_node(self.cluster.namesrv_addr, self.topic, self.ledger, "slave",
                                 group=f"{self.group}-slave-drain")
        if drain.skipped:
            self.notes.append(f"the slave had no record for {drain.skipped} queue offsets (below its min offset: "
                              "its oldest commitlog file was deleted); it answers a pull there PULL_RETRY_IMMEDIATELY "
                              "with the same offset, so a consumer of the slave retries forever")
        return check(list(self.ledger.sends.values()), list(self.ledger.reads), slave_reads=drain.reads,
                     slave_ack=ack)
