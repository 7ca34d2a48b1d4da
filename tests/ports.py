"""A port that is taken: what a server meets when another process already listens where it is told to."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A port a socket of this process listens on (all interfaces) until the block ends."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        yield holder.getsockname()[1]
