"""gRPC channel and server factories with one set of options for every pyrmq process.

Messages up to ``maxMessageSize`` (4 MiB) plus batching overhead must fit, so both sides allow 64 MiB frames.
Keepalive pings let a client notice a silently dead peer (a paused or partitioned broker) within seconds
instead of waiting for TCP; servers accept those pings without treating them as abuse.
"""

from __future__ import annotations

import grpc

MAX_FRAME_BYTES = 64 * 1024 * 1024

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_FRAME_BYTES),
    ("grpc.max_receive_message_length", MAX_FRAME_BYTES),
    ("grpc.keepalive_time_ms", 5_000),
    ("grpc.keepalive_timeout_ms", 3_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]

SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_FRAME_BYTES),
    ("grpc.max_receive_message_length", MAX_FRAME_BYTES),
    ("grpc.keepalive_time_ms", 5_000),
    ("grpc.keepalive_timeout_ms", 3_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 1_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.so_reuseport", 0),
]


def aio_channel(addr: str) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to ``host:port`` with pyrmq's options."""
    return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)


def aio_server() -> grpc.aio.Server:
    return grpc.aio.server(options=SERVER_OPTIONS)


def bind(server: grpc.aio.Server, host: str, port: int) -> int:
    """Bind ``host:port`` and return the bound port; a port already in use is a clear error."""
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}: address in use or not available; choose another port")
    return bound
