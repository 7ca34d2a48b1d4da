"""Places for connections before their first bytes: per-address and pool bounds, reserved places for known peers,
and the newcomer that always finds a place while an older occupant is still silent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from common.silent_slots import SilentSlots, SlotVerdict


def slots(**kw) -> SilentSlots:
    return SilentSlots(**{"total": 4, "per_host": 2, "reserved": 2, **kw})


def test_a_full_address_gives_the_newcomer_the_place_of_its_oldest_silent_connection_at_any_age():
    s = slots()
    a1 = s.claim("10.0.0.9", 0.0)[1]
    a2 = s.claim("10.0.0.9", 0.001)[1]
    verdict, mine, victim = s.claim("10.0.0.9", 0.002)  # a flood reopening what is closed keeps them all young
    assert verdict is SlotVerdict.EVICT and victim is a1 and mine.host == "10.0.0.9"
    assert s.claim("10.0.0.8", 0.002)[0] is SlotVerdict.ADMIT  # another address is not affected
    mine.spoke = a2.spoke = True
    assert s.claim("10.0.0.9", 9.0) == (SlotVerdict.HOST_FULL, None, None)  # peers that talk keep their places


def test_silent_sockets_from_many_addresses_never_take_the_places_of_a_known_peer_address():
    s = slots()
    s.learn("10.0.0.1")
    for i in range(4):
        s.claim(f"10.0.1.{i}", 0.0)[1].spoke = True  # the shared pool is full of peers that talk
    assert s.claim("10.0.1.9", 0.1)[0] is SlotVerdict.POOL_FULL
    verdict, mine, _ = s.claim("10.0.0.1", 0.1)
    assert verdict is SlotVerdict.ADMIT and mine.known
    s.release(mine)
    assert len(s) == 4


def test_without_reserved_places_a_learned_address_shares_the_pool():
    s = slots(reserved=0, total=2, per_host=2)
    s.learn("10.0.0.1")
    s.claim("10.0.1.1", 0.0)[1].spoke = True
    s.claim("10.0.1.2", 0.0)[1].spoke = True
    assert s.claim("10.0.0.1", 0.1)[0] is SlotVerdict.POOL_FULL


def test_known_addresses_are_bounded_and_the_oldest_is_forgotten_first():
    s = slots(known_max=2)
    for host in ("a", "b", "a", "c"):
        s.learn(host)
    assert list(s.known) == ["a", "c"]


@given(events=st.lists(st.tuples(st.integers(0, 5), st.floats(0, 0.5), st.booleans(), st.booleans()),
                       max_size=60))
def test_bounds_hold_a_talking_occupant_is_never_evicted_and_a_newcomer_finds_a_place_while_one_is_silent(events):
    s = slots()
    s.learn("h0")
    now = 0.0
    for host_no, dt, speak, release in events:
        now += dt
        host = f"h{host_no}"
        before = list(s.active)
        known = host_no == 0
        same_host = [p for p in before if p.host == host]
        pool = [p for p in before if p.known == known]
        full = same_host if len(same_host) >= 2 else pool if len(pool) >= (2 if known else 4) else []
        verdict, mine, victim = s.claim(host, now)
        if victim is not None:
            assert victim in full and not victim.spoke
            assert victim.started == min(p.started for p in full if not p.spoke), "the oldest silent one"
        assert (mine is None) == (bool(full) and all(p.spoke for p in full))
        hosts = [p.host for p in s.active]
        assert all(hosts.count(x) <= 2 for x in hosts)
        assert sum(p.known for p in s.active) <= 2 and sum(not p.known for p in s.active) <= 4
        if mine is not None and speak:
            mine.spoke = True
        if mine is not None and release:
            s.release(mine)
