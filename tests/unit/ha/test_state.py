"""Pure HA decisions: where streaming starts, how a report is judged, what state a link is in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.config import CatchUpFrom
from broker.ha.state import (
    Admission,
    SlaveState,
    Verdict,
    admit,
    check_hello,
    choose_start,
    judge_report,
    link_state,
    slave_state,
)
from broker.ha.status import stale_after_ms
from remoting.ha_codec import ErrorCode
from remoting.ha_handshake import decode_hello, encode_hello

MiB = 1 << 20


def test_an_empty_slave_starts_at_the_master_min_offset_by_default():
    d = choose_start(0, master_min=2 * MiB, master_max=5 * MiB + 7, file_size=MiB, catch_up_from=CatchUpFrom.MIN_OFFSET)
    assert d.start == 2 * MiB and d.error is None


def test_an_empty_slave_starts_at_the_newest_file_with_last_file():
    d = choose_start(0, master_min=2 * MiB, master_max=5 * MiB + 7, file_size=MiB, catch_up_from=CatchUpFrom.LAST_FILE)
    assert d.start == 5 * MiB


def test_a_slave_behind_the_master_min_gets_an_explicit_error():
    d = choose_start(MiB, master_min=2 * MiB, master_max=3 * MiB, file_size=MiB, catch_up_from=CatchUpFrom.MIN_OFFSET)
    assert d.error.code is ErrorCode.SLAVE_BEHIND_MASTER_MIN and "wipe the slave store" in d.error.message


def test_a_slave_ahead_of_the_master_max_gets_an_explicit_error():
    d = choose_start(4 * MiB, master_min=0, master_max=3 * MiB, file_size=MiB, catch_up_from=CatchUpFrom.MIN_OFFSET)
    assert d.error.code is ErrorCode.SLAVE_AHEAD_OF_MASTER_MAX


@given(value=st.integers(0, 1000), last=st.integers(0, 1000), sent=st.integers(0, 1000), mx=st.integers(0, 1000))
def test_only_growing_acks_within_what_was_sent_and_the_master_max_advance(value, last, sent, mx):
    v = judge_report(value, last_ack=last, sent_upto=sent, master_max=mx)
    advances = last < value <= min(mx, max(sent, last))
    assert (v is Verdict.ACK) == advances
    if value > mx:
        assert v is Verdict.BEYOND_MAX


def hello(**kw):
    base = {"broker_id": 1, "cluster": "C", "broker_name": "b", "nonce": bytes(16)}
    base.update(kw)
    return decode_hello(encode_hello(**base))[0]


def test_hello_checks_refuse_strangers_and_accept_the_group_slave():
    ok = {"cluster": "C", "broker_name": "b"}
    assert check_hello(hello(), **ok) is None
    assert check_hello(hello(broker_name="x"), **ok).code is ErrorCode.PEER_REFUSED
    assert check_hello(hello(cluster="D"), **ok) is not None
    assert check_hello(hello(broker_id=0), **ok) is not None


@given(authenticated=st.booleans(), live=st.booleans(), silent=st.floats(0, 100), idle=st.floats(0.001, 100))
def test_a_live_broker_id_is_taken_over_only_once_its_link_is_proven_dead(authenticated, live, silent, idle):
    got = admit(authenticated=authenticated, live_with_same_id=live, old_silent_s=silent, idle_s=idle)
    if not live:
        model = Admission.NEW
    elif silent >= idle:
        model = Admission.REPLACE  # nothing read for haHousekeepingInterval: dead, whoever asks
    else:
        model = Admission.DUPLICATE if authenticated else Admission.REFUSE  # never a swap while it reads
    assert got is model


@given(connected=st.booleans(), silent=st.integers(-1, 30_000), stale_after=st.integers(1, 20_000),
       ack=st.integers(0, 1000), mx=st.integers(0, 1000), fallbehind=st.integers(1, 500))
def test_a_slave_state_against_a_model(connected, silent, stale_after, ack, mx, fallbehind):
    got = slave_state(connected=connected, silent_ms=silent, stale_after_ms=stale_after, ack_offset=ack,
                      master_max=mx, fallbehind_max=fallbehind)
    if not connected:
        model = SlaveState.DISCONNECTED
    elif silent > stale_after:
        model = SlaveState.STALE  # before FALL_BEHIND: a silent slave's ack says nothing of now
    elif mx - ack >= fallbehind:
        model = SlaveState.FALL_BEHIND
    else:
        model = SlaveState.OK
    assert got is model
    assert link_state(connected=connected, silent_ms=silent, stale_after_ms=stale_after) is (
        model if model is not SlaveState.FALL_BEHIND else SlaveState.OK)


def test_stale_after_is_one_and_a_half_heartbeats_and_at_least_one_plus_a_second():
    assert stale_after_ms(5000) == 7500  # RocketMQ's default haSendHeartbeatInterval
    assert stale_after_ms(200) == 1200
    assert stale_after_ms(2000) == 3000
    for interval in (1, 100, 1999, 2000, 2001, 5000, 60_000):
        assert stale_after_ms(interval) >= interval + 1000  # never before a heartbeat is overdue by a second
