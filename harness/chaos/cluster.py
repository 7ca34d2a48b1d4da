"""The cluster under chaos: one nameserver, one master and its slave, as real processes, with the faults the
schedules inject (spec/reliability.md §5: F3, F4, F6, F7, N1, C7).

The processes come from the caller's process harness (``procs``: anything with ``Namesrv(workdir)`` and
``Broker(workdir, name=, namesrv_addr=, role=, broker_id=, **conf)`` objects that ``start``, ``stop``, ``kill``,
``pause`` and ``resume``, e.g. harness/procs.py).

Where the machine allows it (root), the slave runs in a network namespace of its own (``harness.netns``), so
the master-slave HA link can be partitioned alone, and its store sits on a small tmpfs (``harness.small_disk``),
so its disk can fill up. The master then advertises the host side of the veth pair, which the slave, the
nameserver and the clients all reach. Without them the slave runs next to the master on 127.0.0.1 and the two
faults are reported as skipped with the reason.

Blocking calls (process start and stop, ip, mount): call them from a thread in asynchronous code.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import netns, small_disk
from harness.checker import Mode
from harness.netns_broker import write_netns_file

BROKER_NAME = "broker-chaos"
COMMITLOG_FILE_BYTES = 256 * 1024  # small files: a run rolls several, on master and slave
SLAVE_DISK_BYTES = 64 * 1024 * 1024
BOOT_S = 40.0  # a broker's boot on a loaded 2-core box, recovery included


@dataclass
class ClusterSpec:
    mode: Mode
    use_netns: bool = True
    slave_disk_bytes: int | None = SLAVE_DISK_BYTES
    commitlog_file_bytes: int = COMMITLOG_FILE_BYTES
    master_conf: dict[str, object] = field(default_factory=dict)  # extra broker.conf keys
    slave_conf: dict[str, object] = field(default_factory=dict)


class ChaosCluster:
    def __init__(self, workdir: Path, procs: Any, spec: ClusterSpec) -> None:
        self.workdir = workdir
        self.procs = procs
        self.spec = spec
        self.secret = secrets.token_hex(16)
        self.ns: netns.NetNamespace | None = None
        self.disk: small_disk.SmallDisk | None = None
        self.skipped: dict[str, str] = {}  # fault kind -> why this cluster cannot inject it
        self.namesrv = None
        self.master = None
        self.slave = None
        self.host_ip = "127.0.0.1"
        self.slave_ip = "127.0.0.1"

    # lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> ChaosCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        why = netns.unavailable() if self.spec.use_netns else "not asked for"
        if why is None:
            self.ns = netns.NetNamespace.create("chaos")
            self.host_ip, self.slave_ip = self.ns.host_ip, self.ns.ns_ip
        else:
            self.skipped["partition-ha"] = f"no network namespace: {why}"
        self.namesrv = self.procs.Namesrv(self.workdir / "ns").start()
        role = "SYNC_MASTER" if self.spec.mode is Mode.SYNC else "ASYNC_MASTER"
        common = {"mappedFileSizeCommitLog": self.spec.commitlog_file_bytes, "haAuthSecret": self.secret}
        self.master = self.procs.Broker(self.workdir / "m", name=BROKER_NAME, namesrv_addr=self.namesrv_addr,
                                        role=role, **{"brokerIP1": self.host_ip, **common, **self.spec.master_conf})
        self.master.start(BOOT_S)
        slave_conf = {"brokerIP1": self.slave_ip, "haMasterAddress": f"{self.host_ip}:{self.master.ha_port}",
                      "slaveReadEnable": True, "slaveSynchronizeInterval": 1000, **common, **self.spec.slave_conf}
        self.slave = self.procs.Broker(self.workdir / "s", name=BROKER_NAME, namesrv_addr=self.namesrv_addr,
                                       role="SLAVE", broker_id=1, **slave_conf)
        if self.ns is not None:
            self.slave.module = "harness.netns_broker"
            write_netns_file(self.slave.conf_path, self.ns.name)
        why = small_disk.unavailable() if self.spec.slave_disk_bytes else "not asked for"
        if why is None:
            self.disk = small_disk.SmallDisk(self.slave.store_dir, self.spec.slave_disk_bytes).mount()
        else:
            self.skipped["disk-full-slave"] = f"no small filesystem for the slave's store: {why}"
        self.slave.start(BOOT_S)

    def stop(self) -> None:
        """Stop everything and undo every fault; safe to call twice and after a failed start."""
        for proc in (self.slave, self.master, self.namesrv):
            if proc is not None:
                try:
                    proc.resume()
                    proc.stop()
                except Exception:  # noqa: BLE001 - teardown goes on; the process is killed below if still there
                    proc.kill()
        if self.disk is not None:
            self.disk.free()
            self.disk.unmount()
        if self.ns is not None:
            self.ns.destroy()
            self.ns = None

    # addresses --------------------------------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        return f"{self.host_ip}:{self.namesrv.port}"

    @property
    def master_addr(self) -> str:
        return f"{self.host_ip}:{self.master.port}"

    @property
    def slave_addr(self) -> str:
        return f"{self.slave_ip}:{self.slave.port}"

    def node(self, name: str) -> Any:
        return {"master": self.master, "slave": self.slave}[name]

    # faults -----------------------------------------------------------------------------------------------
    def partition_ha(self) -> None:
        """Blackhole the slave's HA connection to the master (only that link)."""
        assert self.ns is not None, self.skipped.get("partition-ha")
        self.ns.cut(self.host_ip, self.master.ha_port)

    def heal_ha(self) -> None:
        if self.ns is not None:
            self.ns.heal_all()

    def fill_slave_disk(self) -> int:
        assert self.disk is not None, self.skipped.get("disk-full-slave")
        return self.disk.fill()

    def free_slave_disk(self) -> None:
        if self.disk is not None:
            self.disk.free()

    def heal_all(self) -> None:
        """Undo every fault that may still be on: partitions, a full disk, paused or stopped processes."""
        self.heal_ha()
        self.free_slave_disk()
        for proc in (self.namesrv, self.master, self.slave):
            proc.resume()
            if not proc.running():
                proc.start(BOOT_S)
