"""ClientManager: consumer ids per group, sorted; silent clients are dropped after the expiry."""

from __future__ import annotations

from broker.client_manager import ClientManager


def test_consumer_ids_are_sorted_and_a_silent_client_is_dropped_after_the_expiry():
    m = ClientManager(expire_s=120)
    assert m.consumer_heartbeat("b", "g", now=0.0, subscriptions=[("T", "*")])
    assert m.consumer_heartbeat("a", "g", now=100.0)
    assert not m.consumer_heartbeat("b", "g", now=100.0)  # known member: no membership change
    assert m.consumer_ids("g") == ["a", "b"]
    assert m.scan_expired(now=219.0) == 0
    m.consumer_heartbeat("a", "g", now=200.0)
    assert m.scan_expired(now=221.0) == 1
    assert m.consumer_ids("g") == ["a"]
    assert m.scan_expired(now=400.0) == 1 and m.consumer_ids("g") == []


def test_unregister_removes_a_client_from_one_group_or_all():
    m = ClientManager()
    m.consumer_heartbeat("c", "g1", now=0.0)
    m.consumer_heartbeat("c", "g2", now=0.0)
    m.unregister("c", consumer_group="g1")
    assert m.consumer_ids("g1") == [] and m.consumer_ids("g2") == ["c"]
    m.unregister("c")
    assert m.consumer_ids("g2") == []


def test_a_heartbeat_keeps_a_bounded_number_of_subscriptions():
    m = ClientManager()
    m.consumer_heartbeat("c", "g", now=0.0, subscriptions=((f"T{i}", "*") for i in range(100_000)))
    assert len(m.subscriptions("g")) == 1024
