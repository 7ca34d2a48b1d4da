"""The client message id (UNIQ_KEY, RocketMQ's MessageClientIDSetter layout): 32 upper-case hex characters,
20 fixed per process, 8 of milliseconds since the generator's epoch, 4 of a counter."""

from __future__ import annotations

import os
import socket

from hypothesis import given
from hypothesis import strategies as st

from client.message import Message, _MsgIdGen, new_msg_id

HEX = set("0123456789ABCDEF")


def test_ids_are_32_upper_hex_with_the_process_prefix_and_pid():
    gen = _MsgIdGen()
    mid = gen.next_id(gen.epoch_ms + 5)
    assert len(mid) == 32 and set(mid) <= HEX
    assert mid[:20] == gen.prefix
    assert socket.inet_ntoa(bytes.fromhex(mid[:8]))  # an IPv4 address
    assert int(mid[8:12], 16) == os.getpid() & 0xFFFF
    assert int(mid[20:28], 16) == 5  # ms since the generator's epoch


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=300))
def test_ids_of_one_generator_never_repeat_below_65536_per_millisecond(offsets):
    gen = _MsgIdGen()
    ids = [gen.next_id(gen.epoch_ms + ms) for ms in offsets]
    assert len(set(ids)) == len(ids)
    for ms, mid in zip(offsets, ids):
        assert int(mid[20:28], 16) == ms


def test_the_counter_wraps_at_16_bits_and_time_wraps_at_32_bits():
    gen = _MsgIdGen()
    first = [gen.next_id(gen.epoch_ms) for _ in range(65_537)]
    assert first[0][28:] == first[-1][28:]  # the 65,537th id of one millisecond repeats the counter
    assert gen.next_id(gen.epoch_ms + 2**32 + 7)[20:28] == "00000007"


def test_generators_of_one_process_differ_in_their_random_part():
    assert _MsgIdGen().prefix != _MsgIdGen().prefix


def test_a_message_keeps_its_id_when_sent_again():
    msg = Message("T", b"x")
    first = msg.to_pb(1).properties["UNIQ_KEY"]
    assert msg.msg_id == first and msg.to_pb(2).properties["UNIQ_KEY"] == first
    assert new_msg_id() != new_msg_id()
