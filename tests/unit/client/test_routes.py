"""Route building and broker address choice (spec §2.7 and §5.4): pure functions plus the health fallback."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.message import MessageQueue
from client.route_cache import RouteCache, build_route, pick_broker_id
from client.rpc import HealthTracker

M, S1, S2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


# pick_broker_id: exact id, then id+1 for a slave id, then the lowest id --------------------------------------
@pytest.mark.parametrize(
    ("addrs", "wanted", "only_this", "chosen"),
    [
        ({0: M, 1: S1}, 0, False, 0),  # exact master
        ({0: M, 1: S1}, 1, False, 1),  # exact slave
        ({0: M, 2: S2}, 1, False, 2),  # slave 1 gone: its neighbour id+1
        ({1: S1, 2: S2}, 0, False, 1),  # master gone: the lowest id, never master+1 by rule
        ({0: M}, 1, False, 0),  # no slave at all: the master
        ({0: M, 3: S2}, 1, False, 0),  # neither 1 nor 2: the lowest id
        ({0: M}, 1, True, None),  # only this broker, and it is absent
        ({0: M, 1: S1}, 1, True, 1),
        ({}, 0, False, None),
    ],
)
def test_pick_broker_id_follows_the_spec_fallback_chain(addrs, wanted, only_this, chosen):
    assert pick_broker_id(addrs, wanted, only_this) == chosen


@given(st.dictionaries(st.integers(0, 6), st.just("x"), max_size=5), st.integers(0, 6), st.booleans())
def test_pick_broker_id_always_names_a_present_id_or_none(addrs, wanted, only_this):
    chosen = pick_broker_id(addrs, wanted, only_this)
    if chosen is None:
        assert not addrs or (only_this and wanted not in addrs)
    else:
        assert chosen in addrs
        assert chosen == wanted or not only_this


# find_broker_address_in_subscribe: the §5.4 choice, then a healthy sibling -----------------------------------
def qd(name: str, read: int, write: int, perm: int) -> dict:
    """A QueueData as the nameserver's TopicRouteData carries it (spec §5.3)."""
    return {"brokerName": name, "perm": perm, "readQueueNums": read, "topicSysFlag": 0, "writeQueueNums": write}


def bd(name: str, addrs: dict) -> dict:
    return {"brokerAddrs": addrs, "brokerName": name, "cluster": "C"}


def cache_with(groups: dict[str, dict[int, str]], health: HealthTracker | None = None) -> RouteCache:
    cache = RouteCache(namesrv=None, health=health or HealthTracker(avoid_s=60))
    route = build_route(
        "T",
        [qd(name, 2, 2, 6) for name in groups],
        [bd(name, ids) for name, ids in groups.items()],
    )
    cache._install(route)
    return cache


def test_subscribe_address_is_the_suggested_node_and_says_whether_it_is_a_slave():
    cache = cache_with({"b": {0: M, 1: S1}})
    assert cache.find_broker_address_in_subscribe("b", 0) == (M, False)
    assert cache.find_broker_address_in_subscribe("b", 1) == (S1, True)
    assert cache.find_broker_address_in_subscribe("unknown", 0) is None


def test_an_unhealthy_choice_moves_to_the_lowest_healthy_sibling_unless_only_this_broker():
    health = HealthTracker(avoid_s=60)
    cache = cache_with({"b": {0: M, 1: S1, 2: S2}}, health)
    health.mark_failed(M)
    assert cache.find_broker_address_in_subscribe("b", 0) == (S1, True)
    assert cache.find_broker_address_in_subscribe("b", 0, only_this_broker=True) == (M, False)
    health.mark_failed(S1)
    assert cache.find_broker_address_in_subscribe("b", 0) == (S2, True)
    health.mark_failed(S2)  # nobody healthy: keep the spec's choice
    assert cache.find_broker_address_in_subscribe("b", 1) == (S1, True)
    health.mark_ok(M)
    assert cache.find_broker_address_in_subscribe("b", 2) == (M, False)


def test_publish_address_is_the_master_only():
    cache = cache_with({"b": {1: S1}})
    assert cache.find_broker_address_in_publish("b") is None
    assert cache.find_broker_address_in_subscribe("b", 0) == (S1, True)  # reads may still go to the slave


# build_route ---------------------------------------------------------------------------------------------
def test_build_route_publishes_only_writable_queues_of_groups_with_a_master():
    qds = [
        qd("b2", 2, 3, 6),
        qd("b1", 4, 4, 4),  # read only
        qd("b3", 1, 1, 6),  # no master
    ]
    bds = [
        bd("b1", {"0": M}),  # quoted ids, as standard JSON carries them
        bd("b2", {0: S1, 1: S2}),  # bare ids, as fastjson writes them
        bd("b3", {1: S2}),
    ]
    route = build_route("T", qds, bds)
    assert route.publish_queues == [MessageQueue("T", "b2", i) for i in range(3)]
    assert route.subscribe_queues == [
        *(MessageQueue("T", "b1", i) for i in range(4)),
        *(MessageQueue("T", "b2", i) for i in range(2)),
        MessageQueue("T", "b3", 0),
    ]
    assert route.broker_addrs == {"b1": {0: M}, "b2": {0: S1, 1: S2}, "b3": {1: S2}}
    assert not route.is_default


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.integers(0, 8),
            st.integers(0, 8),
            st.sampled_from([0, 2, 4, 6]),
            st.booleans(),
        ),
        max_size=3,
        unique_by=lambda t: t[0],
    )
)
def test_build_route_queue_counts_follow_perm_and_master_presence(groups):
    qds = [qd(n, r, w, p) for n, r, w, p, _ in groups]
    bds = [bd(n, {0 if m else 1: f"{n}:1"}) for n, _, _, _, m in groups]
    route = build_route("T", qds, bds)
    assert len(route.publish_queues) == sum(w for _, _, w, p, m in groups if p & 2 and m)
    assert len(route.subscribe_queues) == sum(r for _, r, _, p, _ in groups if p & 4)
    names = [q.broker_name for q in route.publish_queues]
    assert names == sorted(names)  # groups in name order, queue ids ascending within a group


def test_a_tbw102_route_caps_each_groups_write_queues_at_default_topic_queue_nums():
    route = build_route(
        "T", [qd("b1", 8, 8, 7), qd("b2", 2, 2, 7)], [bd("b1", {0: M}), bd("b2", {0: S1})], max_write_queues=4
    )
    assert route.publish_queues == [
        *(MessageQueue("T", "b1", i) for i in range(4)),
        MessageQueue("T", "b2", 0),
        MessageQueue("T", "b2", 1),
    ]


class _SlowNamesrv:
    """A nameserver that never answers: a refresh started in the background stays pending until cancelled."""

    async def topic_route_data(self, topic: str) -> dict:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_stop_ends_background_refreshes_and_none_start_after_it():
    cache = RouteCache(namesrv=_SlowNamesrv(), health=HealthTracker())  # type: ignore[arg-type]
    cache.start()
    cache.refresh_soon("T")
    await asyncio.sleep(0)
    await cache.stop()
    cache.refresh_soon("U")  # e.g. a send failing while its producer stops
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not left, f"route tasks outlived stop(): {left}"
