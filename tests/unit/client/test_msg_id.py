"""The client's process-wide UNIQ_KEY generator (the layout and generator are remoting.message_codec's, tested
in tests/unit/remoting/test_message_codec.py): this process's prefix, and a message keeps its id."""

from __future__ import annotations

import os
import socket

from client import message
from client.message import Message, new_msg_id
from remoting.message_codec import string_to_properties

HEX = set("0123456789ABCDEF")


def test_the_process_generator_uses_this_hosts_ipv4_and_pid():
    mid = new_msg_id()
    assert len(mid) == 32 and set(mid) <= HEX
    assert mid[:20] == message._ID_GEN.prefix
    assert socket.inet_ntoa(bytes.fromhex(mid[:8]))  # an IPv4 address
    assert int(mid[8:12], 16) == os.getpid() & 0xFFFF


def test_generators_of_one_process_differ_in_their_random_part():
    assert message._new_id_generator().prefix != message._new_id_generator().prefix


def test_a_message_keeps_its_id_when_sent_again():
    msg = Message("T", b"x")
    first = string_to_properties(msg.wire_properties(1))["UNIQ_KEY"]
    assert msg.msg_id == first and string_to_properties(msg.wire_properties(2))["UNIQ_KEY"] == first
    assert new_msg_id() != new_msg_id()
