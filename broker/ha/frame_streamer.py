"""Catch-up streaming off the event loop: a worker thread writes HA frames with ``os.sendfile``.

Why a module of its own: this is the only HA code that runs on a worker thread and does blocking syscalls
(``os.write``, ``os.sendfile``, ``poll``) on raw file descriptors. ``connection.py`` decides *what* to send and
when (the asyncio side); this module only knows how to push a list of ``(header, fd, file_position, length)``
frames down a socket, so its rules can be read and tested apart from the connection's state machine:

- it owns (and always closes) the ``dup``ed socket and file descriptors it is handed, so a segment deleted by
  cleanup or a connection closed meanwhile cannot make it write the wrong bytes;
- the socket stays non-blocking (asyncio shares it): EAGAIN waits in ``poll()`` for at most ``stall_s`` without
  progress, then ``TimeoutError``; a set ``abort`` event ends it with ``ConnectionError``;
- ``TCP_CORK`` keeps each header in the same segments as its body.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time


class FdFile:
    """``loop.sendfile`` wants a file object; the store hands out a raw fd it keeps open."""

    __slots__ = ("_fd",)
    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def _wait_writable(poller: select.poll, abort: threading.Event, deadline: float) -> None:
    while not poller.poll(100):
        if abort.is_set():
            raise ConnectionError("HA connection closed while streaming")
        if time.monotonic() > deadline:
            raise TimeoutError("HA slave did not read for haHousekeepingInterval; its socket stayed full")


def stream_frames(sock_fd: int, frames: list[tuple[bytes, int, int, int]], file_fds: list[int],
                  abort: threading.Event, stall_s: float) -> int:
    """Worker thread: write each header, then sendfile its body. Owns and closes ``sock_fd`` and ``file_fds``.

    The socket is non-blocking (asyncio's); EAGAIN waits in poll() for at most ``stall_s`` without progress.
    TCP_CORK keeps a header and its body in the same segments.
    """
    sock = socket.socket(fileno=sock_fd)  # owns sock_fd; never change its blocking mode (shared with asyncio)
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    sent_bodies = 0
    try:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        for header, fd, pos, length in frames:
            if abort.is_set():
                raise ConnectionError("HA connection closed while streaming")
            deadline = time.monotonic() + stall_s
            view = memoryview(header)
            while view:
                try:
                    view = view[os.write(sock_fd, view):]
                except BlockingIOError:
                    _wait_writable(poller, abort, deadline)
            while length > 0:
                try:
                    n = os.sendfile(sock_fd, fd, pos, length)
                except BlockingIOError:
                    _wait_writable(poller, abort, deadline)
                    continue
                if n == 0:
                    raise ConnectionError(f"sendfile wrote nothing at file position {pos}: file shorter than the slice")
                pos += n
                length -= n
                sent_bodies += n
                deadline = time.monotonic() + stall_s
        return sent_bodies
    finally:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        sock.close()
        for fd in file_fds:
            os.close(fd)
