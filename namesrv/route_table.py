"""RouteInfoManager: the nameserver's whole state, as pure code (spec/rocketmq-replication.md §2).

Why pure: every routing rule (one id per address, only the master writes queue data, a dead master leaves its
queue data behind for the slaves' readers) is a decision over four tables. Keeping it free of I/O and clocks
lets tests drive it through any sequence of registrations and expiries and compare it with a naive model.
Callers pass ``now_ms`` from whatever clock they trust (the server uses a monotonic clock so a wall-clock
jump cannot expire every broker at once).

Tables (RocketMQ 4.9.8 names)::

    topic_queue_table  : topic      -> {brokerName -> QueueData}
    broker_addr_table  : brokerName -> BrokerData{cluster, brokerName, broker_addrs: {brokerId -> addr}}
    cluster_addr_table : cluster    -> {brokerName}
    broker_live_table  : brokerAddr -> BrokerLiveInfo{last_update_ms, data_version, ha_server_addr, timeout_ms,
                                                      channel}

Invariants, checked by ``check_invariants`` (tests call it after every step):
- an address appears under at most one id of a BrokerData (step 4 of §2.2);
- every BrokerData has at least one address, and its brokerName is in its cluster's set;
- no cluster set and no topic entry is empty.

``channel`` is whatever the caller registered the broker over (the server passes its connection; the table never
looks inside it). It is how a closed connection finds its brokers (``on_channel_close``): only a broker whose live
entry still names that channel is dropped, so a broker that re-registered over a new connection survives the
late close of its old one.

Nothing is persisted: brokers rebuild the tables by registering after a restart. Not thread-safe; the server
calls it from one event loop only (RocketMQ needed a read/write lock around the same tables).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from common.broker_id import MASTER_ID
from common.perm import PERM_RW, PERM_WRITE
from remoting.data_version import DataVersion
from remoting.topic_config import TopicConfig

DEFAULT_BROKER_CHANNEL_EXPIRED_MS = 120_000


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def copy(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs))


@dataclass(frozen=True)
class BrokerLiveInfo:
    last_update_ms: int
    data_version: DataVersion
    ha_server_addr: str
    timeout_ms: int
    channel: Any = None  # what the broker registered over (opaque here); None when unknown


@dataclass(frozen=True)
class RegisterResult:
    """For a slave: its master's HA address and brokerAddr; both empty while no live master is registered."""

    ha_server_addr: str = ""
    master_addr: str = ""


@dataclass(frozen=True)
class TopicRouteData:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]


@dataclass(frozen=True)
class Expired:
    broker_addr: str
    silent_ms: int
    timeout_ms: int
    channel: Any = None


@dataclass(frozen=True)
class LiveBroker:
    broker_addr: str
    cluster: str
    broker_name: str
    broker_id: int
    info: BrokerLiveInfo


class RouteInfoManager:
    def __init__(self, default_timeout_ms: int = DEFAULT_BROKER_CHANNEL_EXPIRED_MS) -> None:
        self.default_timeout_ms = default_timeout_ms
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    # writes --------------------------------------------------------------------------------------------------
    def register_broker(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: DataVersion,
        topic_configs: Iterable[TopicConfig],
        now_ms: int,
        timeout_ms: int = 0,
        channel: Any = None,
    ) -> RegisterResult:
        """REGISTER_BROKER, spec §2.2 steps 2-8 (the CRC check of step 1 is the processor's)."""
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)  # step 2

        broker_data = self.broker_addr_table.get(broker_name)  # step 3
        register_first = broker_data is None
        if broker_data is None:
            broker_data = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name)

        for other_id, addr in list(broker_data.broker_addrs.items()):  # step 4: one id per address
            if addr == broker_addr and other_id != broker_id:
                del broker_data.broker_addrs[other_id]

        previous_addr = broker_data.broker_addrs.get(broker_id)  # step 5
        holder = self.broker_live_table.get(previous_addr) if previous_addr not in (None, broker_addr) else None
        if holder is not None and holder.data_version.state_version > data_version.state_version:
            # RocketMQ 5: a live holder of this id with a newer stateVersion (controller mode: masterEpoch) wins; the
            # registering broker (an old master that has not learned its demotion) is ignored and not kept alive
            self.broker_live_table.pop(broker_addr, None)
            return RegisterResult()
        broker_data.broker_addrs[broker_id] = broker_addr
        register_first = register_first or previous_addr is None

        if broker_id == MASTER_ID:  # step 6: only the master's registration touches queue data
            previous = self.broker_live_table.get(broker_addr)
            if register_first or previous is None or previous.data_version != data_version:
                for tc in topic_configs:
                    self.topic_queue_table.setdefault(tc.topic_name, {})[broker_name] = QueueData(
                        broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag
                    )

        self.broker_live_table[broker_addr] = BrokerLiveInfo(  # step 7
            now_ms, data_version, ha_server_addr, timeout_ms if timeout_ms > 0 else self.default_timeout_ms, channel
        )

        if broker_id != MASTER_ID:  # step 8
            master_addr = broker_data.broker_addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get(master_addr) if master_addr else None
            if master_addr and master_live is not None:
                return RegisterResult(master_live.ha_server_addr, master_addr)
        return RegisterResult()

    def unregister_broker(self, *, cluster: str, broker_name: str, broker_addr: str, broker_id: int) -> bool:
        """UNREGISTER_BROKER. Unlike RocketMQ, the id's entry is removed only if it still holds ``broker_addr``,
        so a late unregister from a replaced broker cannot remove its successor. Returns whether anything changed.
        """
        changed = self.broker_live_table.pop(broker_addr, None) is not None
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
            del broker_data.broker_addrs[broker_id]
            changed = True
            if not broker_data.broker_addrs:
                self._drop_broker_name(broker_data)
        return changed

    def touch(self, broker_addr: str, now_ms: int) -> bool:
        """Refresh the live entry's time (an unchanged QUERY_DATA_VERSION counts as a heartbeat); False when the
        broker is not registered."""
        live = self.broker_live_table.get(broker_addr)
        if live is None:
            return False
        self.broker_live_table[broker_addr] = dataclasses.replace(live, last_update_ms=now_ms)
        return True

    def query_data_version(
        self, broker_addr: str, data_version: DataVersion, now_ms: int
    ) -> tuple[bool, DataVersion | None]:
        """QUERY_DATA_VERSION: (changed, the DataVersion registered here). Unchanged refreshes the live entry, so
        a broker with ``forceRegister=false`` stays alive by asking (RocketMQ's isBrokerTopicConfigChanged)."""
        live = self.broker_live_table.get(broker_addr)
        changed = live is None or live.data_version != data_version
        if not changed:
            self.touch(broker_addr, now_ms)
        return changed, None if live is None else live.data_version

    def scan_not_active(self, now_ms: int) -> list[Expired]:
        """Drop every broker whose ``last_update_ms + timeout_ms < now_ms`` (spec §2.4)."""
        expired = [
            Expired(addr, now_ms - live.last_update_ms, live.timeout_ms, live.channel)
            for addr, live in self.broker_live_table.items()
            if live.last_update_ms + live.timeout_ms < now_ms
        ]
        for item in expired:
            self.on_channel_destroy(item.broker_addr)
        return expired

    def on_channel_destroy(self, broker_addr: str) -> bool:
        """The broker's connection is gone: spec §2.4 cleanup. When only a master dies, its group's QueueData
        stays and BrokerData keeps the slaves, so consumers go on reading from them. Returns whether anything
        changed.
        """
        changed = self.broker_live_table.pop(broker_addr, None) is not None
        for broker_data in list(self.broker_addr_table.values()):
            ids = [bid for bid, addr in broker_data.broker_addrs.items() if addr == broker_addr]
            for bid in ids:
                del broker_data.broker_addrs[bid]
                changed = True
            if ids and not broker_data.broker_addrs:
                self._drop_broker_name(broker_data)
        return changed

    def on_channel_close(self, channel: Any) -> list[str]:
        """A connection closed: drop every broker whose live entry still names ``channel`` (spec §2.4). A broker
        that registered again over a newer connection keeps its entry. Returns the dropped addresses."""
        if channel is None:
            return []
        addrs = [addr for addr, live in self.broker_live_table.items() if live.channel is channel]
        for addr in addrs:
            self.on_channel_destroy(addr)
        return addrs

    def channel_in_use(self, channel: Any) -> bool:
        """Whether some live broker's entry names ``channel``."""
        return channel is not None and any(live.channel is channel for live in self.broker_live_table.values())

    def delete_topic(self, topic: str, cluster: str = "") -> bool:
        """Forget a topic everywhere, or only its queues on the brokers of ``cluster``."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return False
        if not cluster:
            del self.topic_queue_table[topic]
            return True
        names = self.cluster_addr_table.get(cluster, set())
        removed = [name for name in queues if name in names]
        for name in removed:
            del queues[name]
        if not queues:
            del self.topic_queue_table[topic]
        return bool(removed)

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the write bit of every QueueData of ``broker_name``; returns how many topics it touched."""
        return self._set_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER: every QueueData of ``broker_name`` becomes read-write (RocketMQ sets
        PERM_READ | PERM_WRITE, whatever the perm was); returns how many topics it touched."""
        return self._set_perm(broker_name, lambda _perm: PERM_RW)

    def _set_perm(self, broker_name: str, new_perm) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            qd = queues.get(broker_name)
            if qd is not None:
                queues[broker_name] = dataclasses.replace(qd, perm=new_perm(qd.perm))
                count += 1
        return count

    def _drop_broker_name(self, broker_data: BrokerData) -> None:
        name = broker_data.broker_name
        del self.broker_addr_table[name]
        for cluster, names in list(self.cluster_addr_table.items()):
            names.discard(name)
            if not names:
                del self.cluster_addr_table[cluster]
        for topic, queues in list(self.topic_queue_table.items()):
            if queues.pop(name, None) is not None and not queues:
                del self.topic_queue_table[topic]

    # reads ---------------------------------------------------------------------------------------------------
    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC (spec §2.5): the topic's queue data plus a copy of the BrokerData of every
        brokerName in it. None (TOPIC_NOT_EXIST) unless both queue data and some broker data are found.
        """
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = [self.broker_addr_table[n].copy() for n in sorted(queues) if n in self.broker_addr_table]
        if not broker_datas:
            return None
        return TopicRouteData([queues[n] for n in sorted(queues)], broker_datas)

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        """GET_TOPICS_BY_CLUSTER: topics with queue data on some brokerName of ``cluster``."""
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(topic for topic, queues in self.topic_queue_table.items() if names.intersection(queues))

    def live_brokers(self) -> list[LiveBroker]:
        """Every registered address with its BrokerData identity and live info, for cluster info."""
        out = []
        for broker_data in self.broker_addr_table.values():
            for bid, addr in sorted(broker_data.broker_addrs.items()):
                live = self.broker_live_table.get(addr)
                if live is not None:
                    out.append(LiveBroker(addr, broker_data.cluster, broker_data.broker_name, bid, live))
        return out

    def broker_identity(self, broker_addr: str) -> tuple[str, int] | None:
        """(brokerName, brokerId) registered at ``broker_addr``, if any."""
        for broker_data in self.broker_addr_table.values():
            for bid, addr in broker_data.broker_addrs.items():
                if addr == broker_addr:
                    return broker_data.broker_name, bid
        return None

    def check_invariants(self) -> None:
        for name, bd in self.broker_addr_table.items():
            assert bd.broker_name == name, f"BrokerData {bd.broker_name} filed under {name}"
            assert bd.broker_addrs, f"BrokerData {name} has no address left"
            assert name in self.cluster_addr_table.get(bd.cluster, ()), f"{name} missing from cluster {bd.cluster}"
            addrs = list(bd.broker_addrs.values())
            assert len(addrs) == len(set(addrs)), f"{name} has one address under two ids: {bd.broker_addrs}"
        for cluster, names in self.cluster_addr_table.items():
            assert names, f"cluster {cluster} has no brokerName"
        for topic, queues in self.topic_queue_table.items():
            assert queues, f"topic {topic} has no queue data"
