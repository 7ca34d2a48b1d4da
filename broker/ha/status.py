"""HA runtime status as typed records: what GET_BROKER_HA_STATUS (907) answers, ``mqctl haStatus`` prints and
``broker/metrics.py`` exports. Built by ``HAService.status()``; pure records, no I/O.

``HAStatus.to_json()`` is the wire body. It uses RocketMQ 5's ``HARuntimeInfo`` field names (what its
``mqadmin haStatus`` reads; fastjson writes the getter ``isActivated()`` as ``activated``, the per-second figures
are ``transferredByteInSecond``, singular) and adds pyrmq's own fields, which a RocketMQ tool ignores::

    {"commitLogMaxOffset":L,          pyrmq: this broker's commitlog range, on either role
     "commitLogMinOffset":L,          pyrmq
     "haClientRuntimeInfo":{          a slave's link to its master (zeros and "" on a master, as RocketMQ 5 sends)
        "activated":B,                the HA connection to the master is up
        "lastReadTimestamp":L,        epoch ms of the last frame from the master (0: never)
        "lastWriteTimestamp":L,       epoch ms of the last offset report sent (0: never)
        "masterAddr":S,               the master's HA address (haMasterAddress or the registration reply's)
        "maxOffset":L,                this slave's commitlog max offset
        "replicatedBytes":L,          pyrmq: commitlog bytes appended from the master since start
        "transferredByteInSecond":L},
     "haConnectionInfo":[{            one entry per slave the master knows, disconnected ones included
        "addr":S,                     the slave's peer address on the HA port
        "brokerId":L,                 pyrmq
        "diff":L,                     master max offset minus the slave's ack ("Diff" in haStatus)
        "inSync":B,                   state == OK
        "lastAckTimestamp":L,         pyrmq: epoch ms of the slave's last ack
        "slaveAckOffset":L,
        "state":S,                    pyrmq: OK / FALL_BEHIND / DISCONNECTED
        "transferFromWhere":L,        where streaming to this slave started
        "transferredByteInSecond":L,
        "transferredBytes":L}],       pyrmq: bytes sent to this slave since it connected
     "inSyncSlaveNums":I,
     "master":B,
     "masterCommitLogMaxOffset":L,    the master's commitlog max offset (0 on a slave, as RocketMQ 5)
     "role":S}                        pyrmq: SYNC_MASTER / ASYNC_MASTER / SLAVE

``remoting.fastjson.dumps`` writes the keys in this (alphabetical, fastjson's) order. No ``masterFlushOffset``:
the HA stream does not carry the master's flush offset, so a slave cannot know it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SlaveLinkStatus:
    """One slave as its master sees it."""

    addr: str
    broker_id: int
    ack_offset: int
    diff: int
    state: str  # OK / FALL_BEHIND / DISCONNECTED
    transfer_from: int
    transferred_bytes: int
    transferred_bytes_per_s: int
    last_ack_timestamp: int

    @property
    def in_sync(self) -> bool:
        return self.state == "OK"

    @property
    def connected(self) -> bool:
        return self.state != "DISCONNECTED"

    def to_json(self) -> dict[str, Any]:
        return {
            "addr": self.addr,
            "brokerId": self.broker_id,
            "diff": self.diff,
            "inSync": self.in_sync,
            "lastAckTimestamp": self.last_ack_timestamp,
            "slaveAckOffset": self.ack_offset,
            "state": self.state,
            "transferFromWhere": self.transfer_from,
            "transferredByteInSecond": self.transferred_bytes_per_s,
            "transferredBytes": self.transferred_bytes,
        }


@dataclass(frozen=True, slots=True)
class MasterLinkStatus:
    """A slave's HA client: its link to the master."""

    master_addr: str = ""
    connected: bool = False
    max_offset: int = 0
    last_read_timestamp: int = 0
    last_write_timestamp: int = 0
    replicated_bytes: int = 0
    transferred_bytes_per_s: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "activated": self.connected,
            "lastReadTimestamp": self.last_read_timestamp,
            "lastWriteTimestamp": self.last_write_timestamp,
            "masterAddr": self.master_addr,
            "maxOffset": self.max_offset,
            "replicatedBytes": self.replicated_bytes,
            "transferredByteInSecond": self.transferred_bytes_per_s,
        }


@dataclass(frozen=True, slots=True)
class HAStatus:
    role: str
    commitlog_max_offset: int
    commitlog_min_offset: int
    slaves: tuple[SlaveLinkStatus, ...] = ()
    client: MasterLinkStatus | None = None  # set on a slave

    @property
    def is_master(self) -> bool:
        return self.role != "SLAVE"

    @property
    def in_sync_slave_nums(self) -> int:
        return sum(1 for s in self.slaves if s.in_sync)

    def to_json(self) -> dict[str, Any]:
        return {
            "commitLogMaxOffset": self.commitlog_max_offset,
            "commitLogMinOffset": self.commitlog_min_offset,
            "haClientRuntimeInfo": (self.client or MasterLinkStatus()).to_json(),
            "haConnectionInfo": [s.to_json() for s in self.slaves],
            "inSyncSlaveNums": self.in_sync_slave_nums,
            "master": self.is_master,
            "masterCommitLogMaxOffset": self.commitlog_max_offset if self.is_master else 0,
            "role": self.role,
        }


class ByteRate:
    """Bytes per second of a growing total, per key, measured between reads at least ``min_interval_s`` apart.

    The HA links count bytes but keep no clock-bucketed history; status reads (admin requests, metric scrapes)
    are the samples. A read sooner than ``min_interval_s`` after the last sample repeats the last rate; the first
    read of a key answers 0.
    """

    def __init__(self, min_interval_s: float = 1.0) -> None:
        self.min_interval_s = min_interval_s
        self._samples: dict[object, tuple[float, int, int]] = {}  # key -> (time, total, rate)

    def rate(self, key: object, total: int, now_s: float) -> int:
        sample = self._samples.get(key)
        if sample is None or total < sample[1]:  # new key, or a new connection restarted the count
            self._samples[key] = (now_s, total, 0)
            return 0
        t0, total0, last = sample
        if now_s - t0 < self.min_interval_s:
            return last
        rate = int((total - total0) / (now_s - t0))
        self._samples[key] = (now_s, total, rate)
        return rate
