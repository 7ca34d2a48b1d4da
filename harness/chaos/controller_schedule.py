"""A controller-mode chaos schedule (issue 23): a broker group of three controller-mode brokers, a nameserver running
the controller on a 3-member etcd (harness/etcd.py), the chaos workload (``workload``: SDK producers without
retries, push consumers), and faults on whichever broker the controller names master at that moment, or on etcd:

- ``kill-master``: SIGKILL, held, then started again (it rejoins as a slave, cutting what was never confirmed);
- ``pause-master``: SIGSTOP, held, then SIGCONT (a frozen master that wakes up replaced);
- ``kill-slave``: SIGKILL of a slave, held, then started again;
- ``etcd-majority``: two of the three etcd members SIGKILLed, held, then started again (nothing is elected
  meanwhile; SYNC sends keep their SEND_OK while the SyncStateSet holds: broker/controller_mode/fence.py).

After each heal the group must be whole again (all three in the SyncStateSet) and acked sends must come again
(bounded waits; one that does not come is noted and the schedule goes on). At the end the writers stop, the group
drains, and ``harness.checker`` judges the whole history in SYNC mode, with every SEND_OK's broker and times:
0 acknowledged lost, 0 overlapping SEND_OK periods, 0 unexpected reads, 0 inconsistent offsets.

Blocking calls (process start and stop) run in threads.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from client import AdminClient
from common.errors import PyrmqError
from remoting.errors import RemotingError
from harness.chaos.schedule import LOAD_HELD_ACKS, QUEUES, RECOVERY_S, bounded, wait_for_fact
from harness.chaos.workload import Ledger, Readers, Writers
from harness.checker import Mode, Report, check
from harness.controller_mode import controller_broker, controller_namesrv, replica_info
from harness.etcd import EtcdCluster
from harness.procs import Broker

CONTROLLER_FAULTS = ("kill-master", "pause-master", "kill-slave", "etcd-majority")
GROUP = "broker-cm"


@dataclass(frozen=True)
class ControllerFault:
    kind: str
    hold_s: float = 3.0

    def __post_init__(self) -> None:
        if self.kind not in CONTROLLER_FAULTS:
            raise ValueError(f"unknown fault {self.kind!r}; one of {', '.join(CONTROLLER_FAULTS)}")


@dataclass
class ControllerFaultRecord:
    kind: str
    hold_s: float
    target: str  # the broker (or etcd members) it hit
    whole_after_s: float | None = None  # all three back in the SyncStateSet after the heal
    load_held_after_s: float | None = None
    acked_during: int = 0


@dataclass
class ControllerScheduleResult:
    faults: list[ControllerFaultRecord]
    report: Report
    problems: list[str]
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    masters: list[str] = field(default_factory=list)  # the master after each fault

    def summary(self) -> str:
        f = self.report.figures()
        faults = ", ".join(f"{r.kind} {r.hold_s:g}s on {r.target} (whole after {r.whole_after_s}, load after "
                           f"{r.load_held_after_s}, acked during {r.acked_during})" for r in self.faults)
        return (f"controller-mode schedule {self.duration_s:.0f}s, faults: {faults}; masters {self.masters}; sends "
                f"{f['attempted']}: acked {f['acked']} weak {f['weak']} failed {f['failed']} unknown {f['unknown']}; "
                f"read {f['read']} (duplicated {f['duplicated']}); lost {f['lost']}; SEND_OKs {f['send_oks']}, "
                f"overlapping {f['overlapping_send_ok']}; outcomes {self.outcomes}; notes {self.notes}; "
                f"problems {self.problems}")


class ControllerChaos:
    def __init__(self, workdir: Path, etcd_binary: str, *, writers: int = 2, rate: float = 40.0) -> None:
        self.workdir = workdir
        self.etcd = EtcdCluster(workdir / "etcd", members=3, binary=etcd_binary)
        self.namesrv = None
        self.brokers: list[Broker] = []
        self.topic = "chaos_controller"
        self.n_writers = writers
        self.rate = rate
        self.ledger = Ledger()
        self.notes: list[str] = []

    # lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> ControllerChaos:
        try:
            self.etcd.start()
            self.namesrv = controller_namesrv(self.workdir / "ns", self.etcd.endpoints).start()
            self.brokers = [controller_broker(self.workdir, self.namesrv, GROUP, i, haMaxTimeSlaveNotCatchup=5000)
                            for i in (1, 2, 3)]
            for b in self.brokers:
                b.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in [*self.brokers, self.namesrv]:
            if proc is not None:
                try:
                    proc.resume()
                    proc.stop()
                except Exception:  # noqa: BLE001 - teardown goes on; the process is killed if still there
                    proc.kill()
        self.etcd.stop()

    # facts ------------------------------------------------------------------------------------------------
    async def replica_info(self):
        """The group's replica info, None while no controller answers (etcd's majority lost, a switch)."""
        try:
            return await asyncio.wait_for(replica_info(self.namesrv, GROUP), 3.0)
        except (PyrmqError, RemotingError, TimeoutError, OSError):
            return None

    async def master(self) -> Broker | None:
        info = await self.replica_info()
        if info is None:
            return None
        return next((b for b in self.brokers if b.addr == info.master_address), None)

    async def whole(self) -> bool:
        info = await self.replica_info()
        return info is not None and info.master_broker_id is not None and len(info.sync_state_set) == 3

    async def everyone_knows_topic(self, admin: AdminClient) -> bool:
        for b in self.brokers:
            configs = await bounded(admin.all_topic_configs(b.addr))
            if configs is None or not any(t.topic_name == self.topic for t in configs.topic_configs):
                return False
        return True

    async def require(self, predicate, timeout_s: float, what: str) -> None:
        if await wait_for_fact(predicate, timeout_s) is None:
            raise TimeoutError(f"controller-mode schedule: {what} not within {timeout_s:.0f} s")

    # faults -----------------------------------------------------------------------------------------------
    async def fault(self, fault: ControllerFault) -> ControllerFaultRecord:
        master = await self.master()
        if master is None:
            await self.require(self.whole, RECOVERY_S, "a master before the fault")
            master = await self.master()
        assert master is not None
        if fault.kind == "kill-slave":
            target = next(b for b in self.brokers if b is not master)
        else:
            target = master
        rec = ControllerFaultRecord(fault.kind, fault.hold_s, "etcd0+etcd1" if fault.kind == "etcd-majority"
                                    else target.addr)
        start = time.monotonic()
        if fault.kind in ("kill-master", "kill-slave"):
            await asyncio.to_thread(target.kill)
        elif fault.kind == "pause-master":
            await asyncio.to_thread(target.pause)
        else:
            await asyncio.to_thread(self.etcd.members[0].kill)
            await asyncio.to_thread(self.etcd.members[1].kill)
        await asyncio.sleep(fault.hold_s)  # the fault's duration (the schedule), not a wait for a state
        if fault.kind in ("kill-master", "kill-slave"):
            await asyncio.to_thread(target.start)
        elif fault.kind == "pause-master":
            await asyncio.to_thread(target.resume)
        else:
            await asyncio.to_thread(self.etcd.start)
        healed = time.monotonic()
        rec.acked_during = self.ledger.acked_since(start) - self.ledger.acked_since(healed)
        rec.whole_after_s = await wait_for_fact(self.whole, RECOVERY_S)
        if rec.whole_after_s is None:
            self.notes.append(f"{fault.kind}: the group was not whole {RECOVERY_S:.0f} s after the heal")
        rec.load_held_after_s = await wait_for_fact(lambda: self.ledger.acked_since(healed) >= LOAD_HELD_ACKS, RECOVERY_S)
        if rec.load_held_after_s is None:
            self.notes.append(f"{fault.kind}: fewer than {LOAD_HELD_ACKS} acked sends {RECOVERY_S:.0f} s after "
                              "the heal")
        return rec

    async def run(self, faults: list[ControllerFault], drain_timeout_s: float = 90.0) -> ControllerScheduleResult:
        started = time.monotonic()
        admin = await AdminClient(self.namesrv.addr, timeout_s=3.0).start()
        readers = writers = None
        masters = []
        try:
            await self.require(self.whole, 30, "the group whole before the load")
            master = await self.master()
            await admin.update_topic(master.addr, self.topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            await self.require(lambda: self.everyone_knows_topic(admin), 30, f"every broker knowing {self.topic}")
            readers = Readers(self.namesrv.addr, self.topic, "chaos-controller", self.ledger)
            await readers.start()
            writers = Writers(self.namesrv.addr, self.topic, self.ledger, writers=self.n_writers, rate=self.rate)
            writers.start()
            await self.require(lambda: len(self.ledger.acked_at) >= LOAD_HELD_ACKS, 30, "acked sends under load")
            records = []
            for f in faults:
                records.append(await self.fault(f))
                now = await self.master()
                masters.append(now.addr if now else "none")
            await writers.stop()
            writers = None
            if await wait_for_fact(lambda: not self.ledger.unread_acked(), drain_timeout_s) is None:
                self.notes.append(f"the group had not read every acked message {drain_timeout_s:.0f} s after the "
                                  "last heal")
        finally:
            if writers is not None:
                await writers.stop()
            if readers is not None:
                await readers.stop()
            await admin.stop()
        report = check(list(self.ledger.sends.values()), list(self.ledger.reads), send_oks=self.ledger.oks)
        outcomes = Counter(s.detail for s in self.ledger.sends.values())
        return ControllerScheduleResult(records, report, report.problems(Mode.SYNC), self.notes,
                                        time.monotonic() - started, dict(outcomes.most_common()), masters)
