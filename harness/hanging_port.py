"""A loopback port whose connects hang: a listener with a full accept queue drops further SYNs, as a partitioned
host or a killed container's vanished address does (the connect neither succeeds nor is refused)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def hanging_port(fillers: int = 4, port: int = 0) -> Iterator[int]:
    """The port of such a listener on 127.0.0.1 (``port``, else a free one), for the ``with`` block."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(0)
    port = listener.getsockname()[1]
    filling = []
    try:
        for _ in range(fillers):
            filler = socket.socket()
            filling.append(filler)
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        yield port
    finally:
        for sock in (*filling, listener):
            sock.close()


def syn_sent_to(port: int) -> int:
    """How many sockets of this host are in SYN_SENT towards ``port`` (connects pending), from /proc/net/tcp."""
    with open("/proc/net/tcp") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return sum(1 for r in rows if int(r[2].split(":")[1], 16) == port and r[3] == "02")
