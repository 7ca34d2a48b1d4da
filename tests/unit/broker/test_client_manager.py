"""ClientManager: clients are known by their connection; consumer ids per group, sorted; a group's subscription
table follows its latest heartbeat; membership changes reach the listeners; silent connections expire."""

from __future__ import annotations

from broker.client_manager import ClientManager, Subscription


class Conn:
    """Stands for a remoting connection (any hashable object works)."""

    def __init__(self, peer: str) -> None:
        self.peer = peer

    def __repr__(self) -> str:
        return f"Conn({self.peer})"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def manager() -> tuple[ClientManager, Clock, list[tuple[str, list]]]:
    clock = Clock()
    m = ClientManager(expire_s=120, clock=clock)
    changes: list[tuple[str, list]] = []
    m.on_group_changed.append(lambda group, conns: changes.append((group, list(conns))))
    return m, clock, changes


def test_consumer_ids_are_sorted_and_only_a_new_connection_changes_the_membership():
    m, _, changes = manager()
    a, b = Conn("a:1"), Conn("b:1")
    assert m.register_consumer(b, "g", "client-b", subscriptions=[Subscription("T")])
    assert m.register_consumer(a, "g", "client-a")
    assert not m.register_consumer(b, "g", "client-b")  # a known connection: no change
    assert m.consumer_ids("g") == ["client-a", "client-b"]
    assert [(g, len(c)) for g, c in changes] == [("g", 1), ("g", 2)]


def test_a_closed_connection_leaves_every_group_and_the_rest_of_the_group_is_told():
    m, _, changes = manager()
    a, b = Conn("a:1"), Conn("b:1")
    m.register_consumer(a, "g1", "ca")
    m.register_consumer(a, "g2", "ca")
    m.register_consumer(b, "g1", "cb")
    m.register_producer(a, "pg", "ca")
    changes.clear()
    assert sorted(m.connection_closed(a)) == ["g1", "g2"]
    assert m.consumer_ids("g1") == ["cb"] and m.consumer_ids("g2") == [] and m.producer_channels("pg") == []
    assert sorted((g, c) for g, c in changes) == [("g1", [b]), ("g2", [])]


def test_unregister_removes_a_connection_from_one_group_or_all():
    m, _, _ = manager()
    c = Conn("c:1")
    m.register_consumer(c, "g1", "c")
    m.register_consumer(c, "g2", "c")
    m.unregister(c, consumer_group="g1")
    assert m.consumer_ids("g1") == [] and m.consumer_ids("g2") == ["c"]
    m.unregister(c)
    assert m.consumer_ids("g2") == []


def test_the_subscription_table_follows_the_latest_heartbeat_of_the_group():
    m, _, _ = manager()
    c = Conn("c:1")
    m.register_consumer(c, "g", "c", subscriptions=[Subscription("A", "x || y", sub_version=5), Subscription("B")])
    sub = m.subscription("g", "A")
    assert sub is not None and sub.tag_filter.tags == {"x", "y"} and sub.sub_version == 5
    m.register_consumer(c, "g", "c", subscriptions=[Subscription("A", "x || y", sub_version=4)])
    assert m.subscription("g", "A").sub_version == 5  # an older version does not replace a newer one
    assert m.subscription("g", "B") is None  # dropped: the latest heartbeat no longer names it
    assert m.subscriptions("g") == {"A": "x || y"}


def test_a_heartbeat_keeps_a_bounded_number_of_subscriptions():
    m, _, _ = manager()
    m.register_consumer(Conn("c:1"), "g", "c", subscriptions=(Subscription(f"T{i}") for i in range(100_000)))
    assert len(m.subscriptions("g")) == 1024


def test_a_silent_connection_expires_and_the_expiry_listeners_close_it():
    m, clock, changes = manager()
    closed: list = []
    m.on_expired.append(closed.append)
    a, b = Conn("a:1"), Conn("b:1")
    m.register_consumer(a, "g", "ca")
    clock.now = 100.0
    m.register_consumer(b, "g", "cb")
    m.register_producer(b, "pg", "cb")
    assert m.scan_expired(now=119.0) == 0
    assert m.scan_expired(now=121.0) == 1 and closed == [a]
    assert m.consumer_ids("g") == ["cb"] and changes[-1] == ("g", [b])
    assert m.scan_expired(now=400.0) == 1 and closed == [a, b] and m.producer_channels("pg") == []


def test_subscription_data_is_written_with_rocketmq_field_names():
    sub = Subscription("T", "a || b", sub_version=7)
    assert sub.as_json() == {
        "classFilterMode": False,
        "codeSet": sorted(sub.tag_filter.codes),
        "expressionType": "TAG",
        "subString": "a || b",
        "subVersion": 7,
        "tagsSet": ["a", "b"],
        "topic": "T",
    }


def test_a_storm_of_new_groups_logs_a_bounded_number_of_join_and_leave_lines(caplog):
    m, _, _ = manager()
    conn = Conn("storm:1")
    with caplog.at_level("INFO", logger="broker.client_manager"):
        for i in range(1000):
            m.register_consumer(conn, f"g{i}", "storm-client")
        m.connection_closed(conn)
    joins = [r for r in caplog.records if "joined group" in r.getMessage()]
    leaves = [r for r in caplog.records if "left group" in r.getMessage()]
    assert len(m.consumers) == 0 and len(joins) <= 3 and len(leaves) <= 3, (len(joins), len(leaves))
