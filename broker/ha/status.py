"""HA runtime status as typed records: what GET_BROKER_HA_STATUS (907) answers, ``mqctl haStatus`` prints and
``broker/metrics.py`` exports. Built by ``HAService.status()``; pure records, no I/O.

``HAStatus.to_json()`` is the wire body. It carries every field of RocketMQ 5's ``HARuntimeInfo`` and its
``HAConnectionRuntimeInfo`` / ``HAClientRuntimeInfo`` under their names (the per-second figures are
``transferredByteInSecond``, singular; the client's flag is its field's name, ``isActivated``, which
rocketmq-rust's DefaultMQAdminExt requires, as it requires ``masterFlushOffset``), and adds pyrmq's own fields,
which RocketMQ's readers skip (tests/rocketmq_bodies.py lists them). Times are epoch milliseconds (``*Timestamp``)
or milliseconds (``*Ms``)::

    {"commitLogMaxOffset":L,          pyrmq: this broker's commitlog range, on either role
     "commitLogMinOffset":L,          pyrmq
     "haClientRuntimeInfo":{          a slave's link to its master (zeros and "" on a master, as RocketMQ 5 sends)
        "isActivated":B,              the HA connection to the master is up (TCP; says nothing of silence)
        "lastReadTimestamp":L,        epoch ms of the last frame from the master (0: never)
        "lastWriteTimestamp":L,       epoch ms of the last offset report sent (0: never)
        "masterAddr":S,               the master's HA address (haMasterAddress or the registration reply's)
        "masterFlushOffset":L,        0: unknown (below)
        "maxOffset":L,                this slave's commitlog max offset
        "replicatedBytes":L,          pyrmq: commitlog bytes appended from the master since start
        "sinceLastReadMs":L,          pyrmq: ms since the master last sent a byte; -1 while not connected
        "state":S,                    pyrmq: OK / STALE / DISCONNECTED (below)
        "transferredByteInSecond":L},
     "haConnectionInfo":[{            one entry per slave the master knows, disconnected ones included
        "addr":S,                     the slave's broker address (brokerIP1:listenPort, from its HA hello); its HA
                                      peer address when the slave did not send one (an older pyrmq)
        "brokerId":L,                 pyrmq
        "diff":L,                     master max offset minus the slave's ack ("Diff" in haStatus)
        "haPeerAddr":S,               pyrmq: the HA socket's peer (container IP:ephemeral port), for debugging
        "inSync":B,                   state == OK
        "lastAckTimestamp":L,         pyrmq: epoch ms of the slave's last ack that advanced
        "lastReadTimestamp":L,        pyrmq: epoch ms of the slave's last report (ack or heartbeat; 0: never)
        "sinceLastReadMs":L,          pyrmq: ms since that report; -1 when none came
        "slaveAckOffset":L,
        "state":S,                    pyrmq: OK / FALL_BEHIND / STALE / DISCONNECTED (below)
        "transferFromWhere":L,        where streaming to this slave started
        "transferredByteInSecond":L,
        "transferredBytes":L}],       pyrmq: bytes sent to this slave since it connected
     "inSyncSlaveNums":I,
     "master":B,
     "masterCommitLogMaxOffset":L,    the master's commitlog max offset (0 on a slave, as RocketMQ 5)
     "role":S,                        pyrmq: SYNC_MASTER / ASYNC_MASTER / SLAVE
     "staleAfterMs":L}                pyrmq: the silence after which a connected link shows STALE

``remoting.fastjson.dumps`` writes the keys in this (alphabetical, fastjson's) order. ``masterFlushOffset`` is
always 0, meaning unknown: the HA stream does not carry the master's flush offset, so a slave cannot know it
(RocketMQ fills it only in its controller-mode HA, from the handshake). Before issue 22 the flag was written
``activated`` and ``masterFlushOffset`` was missing; ``client/admin_bodies.py`` reads either spelling.

**States.** DISCONNECTED: no HA connection (the master keeps a departed slave's row for
``haDisconnectedSlaveKeepInterval``). STALE: connected, but nothing read from the peer for more than
``stale_after_ms(haSendHeartbeatInterval)``. On a master, FALL_BEHIND: the ack trails the max offset by
``haSlaveFallbehindMax`` or more; a STALE slave shows STALE, not FALL_BEHIND (its ack is old news). OK otherwise.

Why the STALE threshold is safe: neither end of a live link is ever silent for longer than one
``haSendHeartbeatInterval`` (5 s by default, as RocketMQ). The master writes data frames, or a header-only
heartbeat once the interval passed without a write (``connection.py``); the slave reports its max offset after
every batch it appends, else once per interval (``slave.py``). So a link silent for 1.5 intervals (7.5 s by
default; at least one interval plus 1 s, so a short test interval does not flag scheduling delays on a loaded
machine) has missed a heartbeat: the peer is frozen, partitioned or gone. Without this, a link looks
``activated`` until ``haHousekeepingInterval`` (20 s) expires it; STALE comes 12.5 s sooner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def stale_after_ms(heartbeat_interval_ms: int) -> int:
    """The silence (ms) after which a connected HA link is STALE: 1.5 heartbeat intervals, at least one plus 1 s."""
    return max(heartbeat_interval_ms * 3 // 2, heartbeat_interval_ms + 1000)


@dataclass(frozen=True, slots=True)
class SlaveLinkStatus:
    """One slave as its master sees it."""

    addr: str  # the slave's broker address; its HA peer address when it did not send one
    broker_id: int
    ack_offset: int
    diff: int
    state: str  # OK / FALL_BEHIND / STALE / DISCONNECTED
    transfer_from: int
    transferred_bytes: int
    transferred_bytes_per_s: int
    last_ack_timestamp: int
    peer_addr: str = ""  # the HA socket's peer
    last_read_timestamp: int = 0  # epoch ms of the last report (ack or heartbeat)
    since_last_read_ms: int = -1  # -1: no report yet

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
            "haPeerAddr": self.peer_addr,
            "inSync": self.in_sync,
            "lastAckTimestamp": self.last_ack_timestamp,
            "lastReadTimestamp": self.last_read_timestamp,
            "sinceLastReadMs": self.since_last_read_ms,
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
    since_last_read_ms: int = -1  # -1 while not connected
    state: str = "DISCONNECTED"  # OK / STALE / DISCONNECTED

    def to_json(self) -> dict[str, Any]:
        return {
            "isActivated": self.connected,
            "lastReadTimestamp": self.last_read_timestamp,
            "lastWriteTimestamp": self.last_write_timestamp,
            "masterAddr": self.master_addr,
            "masterFlushOffset": 0,
            "maxOffset": self.max_offset,
            "replicatedBytes": self.replicated_bytes,
            "sinceLastReadMs": self.since_last_read_ms,
            "state": self.state,
            "transferredByteInSecond": self.transferred_bytes_per_s,
        }


@dataclass(frozen=True, slots=True)
class HAStatus:
    role: str
    commitlog_max_offset: int
    commitlog_min_offset: int
    slaves: tuple[SlaveLinkStatus, ...] = ()
    client: MasterLinkStatus | None = None  # set on a slave
    stale_after_ms: int = 0  # stale_after_ms(haSendHeartbeatInterval)
    # Counters for broker/metrics.py, not part of the wire body:
    connections_accepted: int = 0  # master: slave connections accepted since start (a reconnect counts)
    reconnects: int = 0  # slave: connection attempts that failed or ended (each is followed by a retry)

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
            "staleAfterMs": self.stale_after_ms,
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
