"""A controller-mode broker group that real clients write to while its master is SIGKILLed: the pieces the
compatibility tests (tests/compat/test_controller_failover.py) and ``bench/client_failover_bench.py`` share.

``ControllerGroup`` is one etcd, a nameserver running the controller and three controller-mode brokers with the fast
timings of ``harness.controller_mode`` (the broker group is the topic's only one). ``kill_master`` SIGKILLs whichever
broker the controller names master. ``SendLog`` records every send of a client with its outcome for
``harness.checker`` and the monotonic time of the first SEND_OK after the kill (the figure the bench reports; tests
never assert on it).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from client import AdminClient
from controller.client import ReplicaInfo
from harness.checker import Outcome, Send
from harness.controller_mode import controller_broker, controller_namesrv, replica_info
from harness.etcd import EtcdServer
from harness.procs import Broker, Namesrv
from harness.waiting import wait_until

GROUP = "broker-cc"
READY_S = 60.0


class ControllerGroup:
    """Started by ``with``: etcd, the controller's nameserver, broker-cc-1..3 with a whole SyncStateSet."""

    def __init__(self, workdir: Path, etcd_binary: str, **broker_conf: object) -> None:
        self.workdir = workdir
        self.etcd = EtcdServer(workdir / "etcd", binary=etcd_binary)
        self.ns: Namesrv | None = None
        self.brokers: list[Broker] = []
        self.broker_conf = broker_conf

    def __enter__(self) -> ControllerGroup:
        try:
            self.etcd.__enter__()
            self.ns = controller_namesrv(self.workdir / "ns", self.etcd.endpoint).__enter__()
            self.brokers = [controller_broker(self.workdir, self.ns, GROUP, i, **self.broker_conf) for i in (1, 2, 3)]
            for b in self.brokers:
                b.start()
            wait_until(lambda: self.info().sync_state_set == {1, 2, 3}, READY_S,
                       lambda: f"the SyncStateSet never grew to three: {self.info()}", interval_s=0.1)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for b in self.brokers:
            b.resume()
            b.stop()
        if self.ns is not None:
            self.ns.stop()
        self.etcd.__exit__(None, None, None)

    @property
    def namesrv_addr(self) -> str:
        assert self.ns is not None
        return self.ns.addr

    def info(self) -> ReplicaInfo:
        assert self.ns is not None
        return asyncio.run(replica_info(self.ns, GROUP))

    def master(self) -> Broker:
        return self.brokers[self.info().master_broker_id - 1]

    def access_point(self) -> str:
        """Every broker's v2 endpoint, ';'-separated: the official client's access point survives any one of them."""
        return ";".join(b.grpc_addr for b in self.brokers)

    def create_topic(self, topic: str, queues: int = 2) -> None:
        """On the master; returns once the nameserver routes it and every slave has synced it (a slave that does not
        know the topic cannot take over its queues' consumers)."""

        master = self.master().addr

        async def run() -> None:
            async with AdminClient(self.namesrv_addr) as admin:
                await admin.update_topic(master, topic, read_queue_nums=queues, write_queue_nums=queues)
                deadline = time.monotonic() + READY_S
                while True:
                    known = [any(c.topic_name == topic for c in (await admin.all_topic_configs(b.addr)).topic_configs)
                             for b in self.brokers]
                    if all(known):
                        return
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"topic {topic} is not on every broker: {known}")
                    await asyncio.sleep(0.2)

        asyncio.run(run())

    def kill_master(self) -> tuple[Broker, float]:
        """SIGKILL the master the controller names; (it, the monotonic time of the kill)."""
        master = self.master()
        master.kill()
        return master, time.monotonic()

    def wait_new_master(self, old: Broker, topic: str) -> Broker:
        """The broker the controller elected after ``old``, once the nameserver routes ``topic`` to it."""
        wait_until(lambda: self.master() is not old and self.routed_master(topic) == self.master().addr, READY_S,
                   "no new master in the controller and the route", interval_s=0.1)
        return self.master()

    def routed_master(self, topic: str) -> str | None:
        """brokerId 0 of the group in the nameserver's route of ``topic``."""

        async def run() -> str | None:
            async with AdminClient(self.namesrv_addr) as admin:
                return (await admin.topic_route(topic)).broker_addrs.get(GROUP, {}).get(0)

        return asyncio.run(run())


@dataclass
class SendLog:
    """Every send of one writer, in order, for ``harness.checker``."""

    writer: str = "w"
    sends: list[Send] = field(default_factory=list)
    killed_at: float | None = None
    first_ok_after_kill: float | None = None
    failed_after_kill: int = 0

    def next_id(self) -> str:
        return f"{self.writer}-{len(self.sends)}"

    def ok(self, ident: str) -> None:
        self.sends.append(Send(ident, self.writer, len(self.sends), Outcome.ACKED, detail="SEND_OK"))
        if self.killed_at is not None and self.first_ok_after_kill is None:
            self.first_ok_after_kill = time.monotonic()

    def unknown(self, ident: str, error: str) -> None:
        """No answer the client believed: it may or may not be stored (the C++ and v2 clients say no more)."""
        self.sends.append(Send(ident, self.writer, len(self.sends), Outcome.UNKNOWN, detail=error[:80]))
        if self.killed_at is not None:
            self.failed_after_kill += 1

    def acked(self) -> set[str]:
        return {s.id for s in self.sends if s.outcome is Outcome.ACKED}

    @property
    def kill_to_send_ok_s(self) -> float | None:
        if self.killed_at is None or self.first_ok_after_kill is None:
            return None
        return self.first_ok_after_kill - self.killed_at

