"""RouteInfoManager agrees with a naive model over random register/unregister/expire/heartbeat/close sequences.

The model (etcd raft's quick_test idea) keeps flat facts instead of nested tables: ``(brokerName, id) -> addr``,
``(topic, brokerName) -> QueueData`` and the ``(cluster, brokerName)`` pairs seen, and after every step sweeps away
whatever belongs to a brokerName with no address left. Queries are computed from those facts from scratch.
Connections are tokens ``c0..c2``: a register names the one it came over, and a closed connection drops exactly the
addresses whose latest registration came over it.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from common.perm import PERM_WRITE
from namesrv.route_table import DataVersion, QueueData, RouteInfoManager, TopicConfig

CLUSTERS = ["C1", "C2"]
NAMES = ["a", "b"]
ADDRS = ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"]
IDS = [0, 1, 2]
TOPICS = ["T1", "T2", "T3"]
CHANNELS = ["c0", "c1", "c2"]
DEFAULT_TIMEOUT_MS = 1000

topic_configs = st.lists(
    st.builds(TopicConfig, st.sampled_from(TOPICS), st.integers(0, 4), st.integers(0, 4), st.sampled_from([2, 4, 6])),
    max_size=3,
)


class Model:
    def __init__(self) -> None:
        self.members: dict[tuple[str, int], str] = {}
        self.group_cluster: dict[str, str] = {}
        self.cluster_pairs: set[tuple[str, str]] = set()
        self.queues: dict[tuple[str, str], QueueData] = {}
        self.live: dict[str, tuple[int, DataVersion, str, int, str]] = {}  # addr -> (last, dv, ha, timeout, chan)

    def names(self) -> set[str]:
        return {name for name, _ in self.members}

    def sweep(self) -> None:
        alive = self.names()
        self.queues = {k: v for k, v in self.queues.items() if k[1] in alive}
        self.cluster_pairs = {p for p in self.cluster_pairs if p[1] in alive}
        self.group_cluster = {n: c for n, c in self.group_cluster.items() if n in alive}

    def register(self, cluster, name, addr, bid, ha, dv, topics, now, timeout, channel):
        self.cluster_pairs.add((cluster, name))
        first = name not in self.names()
        self.group_cluster.setdefault(name, cluster)
        self.members = {k: a for k, a in self.members.items() if not (k[0] == name and a == addr and k[1] != bid)}
        first = first or (name, bid) not in self.members
        self.members[(name, bid)] = addr
        if bid == 0 and (first or addr not in self.live or self.live[addr][1] != dv):
            for tc in topics:
                self.queues[(tc.topic_name, name)] = QueueData(
                    name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag
                )
        self.live[addr] = (now, dv, ha, timeout or DEFAULT_TIMEOUT_MS, channel)
        master = self.members.get((name, 0))
        if bid != 0 and master in self.live:
            return self.live[master][2], master
        return "", ""

    def drop_addr(self, addr):
        self.live.pop(addr, None)
        self.members = {k: a for k, a in self.members.items() if a != addr}
        self.sweep()

    def unregister(self, name, addr, bid):
        self.live.pop(addr, None)
        if self.members.get((name, bid)) == addr:
            del self.members[(name, bid)]
        self.sweep()

    def close(self, channel):
        closed = {a for a, entry in self.live.items() if entry[4] == channel}
        for addr in closed:
            self.drop_addr(addr)
        return closed

    def scan(self, now):
        expired = {a for a, (last, _, _, timeout, _) in self.live.items() if last + timeout < now}
        for addr in expired:
            self.drop_addr(addr)
        return expired

    def route(self, topic):
        queue_datas = sorted((q for (t, _), q in self.queues.items() if t == topic), key=lambda q: q.broker_name)
        groups = {q.broker_name for q in queue_datas}
        broker_datas = [
            (self.group_cluster[n], n, {bid: a for (m, bid), a in self.members.items() if m == n})
            for n in sorted(groups)
        ]
        if not queue_datas or not broker_datas:
            return None
        return queue_datas, broker_datas


class RouteTableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = RouteInfoManager(default_timeout_ms=DEFAULT_TIMEOUT_MS)
        self.model = Model()
        self.now = 0

    @rule(
        cluster=st.sampled_from(CLUSTERS),
        name=st.sampled_from(NAMES),
        addr=st.sampled_from(ADDRS),
        bid=st.sampled_from(IDS),
        dv=st.integers(0, 2),
        topics=topic_configs,
        timeout=st.sampled_from([0, 300, 3000]),
        channel=st.sampled_from(CHANNELS),
    )
    def register(self, cluster, name, addr, bid, dv, topics, timeout, channel):
        ha = f"ha-{addr}"
        version = DataVersion(dv, dv)
        got = self.table.register_broker(
            cluster=cluster,
            broker_name=name,
            broker_addr=addr,
            broker_id=bid,
            ha_server_addr=ha,
            data_version=version,
            topic_configs=topics,
            now_ms=self.now,
            timeout_ms=timeout,
            channel=channel,
        )
        want = self.model.register(cluster, name, addr, bid, ha, version, topics, self.now, timeout, channel)
        assert (got.ha_server_addr, got.master_addr) == want

    @rule(name=st.sampled_from(NAMES), addr=st.sampled_from(ADDRS), bid=st.sampled_from(IDS))
    def unregister(self, name, addr, bid):
        self.table.unregister_broker(cluster="C1", broker_name=name, broker_addr=addr, broker_id=bid)
        self.model.unregister(name, addr, bid)

    @rule(addr=st.sampled_from(ADDRS))
    def channel_destroyed(self, addr):
        self.table.on_channel_destroy(addr)
        self.model.drop_addr(addr)

    @rule(channel=st.sampled_from(CHANNELS))
    def connection_closed(self, channel):
        assert set(self.table.on_channel_close(channel)) == self.model.close(channel)
        assert not self.table.channel_in_use(channel)

    @rule(addr=st.sampled_from(ADDRS), dv=st.integers(0, 2))
    def query_data_version(self, addr, dv):
        version = DataVersion(dv, dv)
        changed, stored = self.table.query_data_version(addr, version, self.now)
        entry = self.model.live.get(addr)
        assert changed == (entry is None or entry[1] != version)
        assert stored == (None if entry is None else entry[1])
        if entry is not None and not changed:
            self.model.live[addr] = (self.now, *entry[1:])

    @rule(elapsed_ms=st.integers(0, 2000))
    def time_passes_and_scan_runs(self, elapsed_ms):
        self.now += elapsed_ms
        expired = self.table.scan_not_active(self.now)
        channels = {a: entry[4] for a, entry in self.model.live.items()}
        assert {e.broker_addr for e in expired} == self.model.scan(self.now)
        assert all(e.channel == channels[e.broker_addr] for e in expired)

    @rule(name=st.sampled_from(NAMES))
    def wipe_write_perm(self, name):
        count = self.table.wipe_write_perm(name)
        keys = [k for k in self.model.queues if k[1] == name]
        for k in keys:
            q = self.model.queues[k]
            self.model.queues[k] = QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums,
                                             q.perm & ~PERM_WRITE, q.topic_sys_flag)
        assert count == len(keys)

    @invariant()
    def routes_agree_with_the_model(self):
        self.table.check_invariants()
        for topic in TOPICS:
            got = self.table.pickup_topic_route(topic)
            want = self.model.route(topic)
            if want is None:
                assert got is None, f"{topic}: table routes {got}, model has none"
            else:
                assert got is not None, f"{topic}: model routes {want}, table has none"
                assert got.queue_datas == want[0]
                assert [(b.cluster, b.broker_name, b.broker_addrs) for b in got.broker_datas] == want[1]

    @rule(name=st.sampled_from(NAMES))
    def add_write_perm(self, name):
        count = self.table.add_write_perm(name)
        keys = [k for k in self.model.queues if k[1] == name]
        for k in keys:
            q = self.model.queues[k]
            self.model.queues[k] = QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, 6, q.topic_sys_flag)
        assert count == len(keys)

    @invariant()
    def cluster_info_and_topics_agree_with_the_model(self):
        assert self.table.all_topics() == sorted({t for t, _ in self.model.queues})
        for cluster in CLUSTERS:
            names = {n for c, n in self.model.cluster_pairs if c == cluster}
            want = sorted({t for t, n in self.model.queues if n in names})
            assert self.table.topics_by_cluster(cluster) == want
        for channel in CHANNELS:
            in_use = any(entry[4] == channel for entry in self.model.live.values())
            assert self.table.channel_in_use(channel) == in_use
        assert set(self.table.broker_live_table) == set(self.model.live)
        clusters: dict[str, set[str]] = {}
        for cluster, name in self.model.cluster_pairs:
            clusters.setdefault(cluster, set()).add(name)
        assert self.table.cluster_addr_table == clusters


RouteTableMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_route_table_agrees_with_a_naive_model = RouteTableMachine.TestCase
