"""harness.procs.free_port hands out distinct ports and gives up, saying why, when the OS keeps repeating one."""

import socket

import pytest

from harness import procs


def test_free_port_never_repeats_a_recent_port():
    ports = [procs.free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)


def test_free_port_stops_after_its_tries_when_the_os_only_offers_used_ports(monkeypatch):
    used = procs.free_port()
    binds = []

    class SamePort(socket.socket):
        def bind(self, address):
            binds.append(address)

        def getsockname(self):
            return ("127.0.0.1", used)

    monkeypatch.setattr(procs.socket, "socket", SamePort)
    with pytest.raises(RuntimeError, match=f"{procs.FREE_PORT_TRIES} ephemeral ports in a row"):
        procs.free_port()
    assert len(binds) == procs.FREE_PORT_TRIES
