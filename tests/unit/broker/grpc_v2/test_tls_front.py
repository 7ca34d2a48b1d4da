"""The permissive v2 port's front (broker.grpc_v2.tls_front) over loopback sockets: a plaintext connection and a TLS
one reach their backends with every byte, in both directions, including what a backend says at once on connecting
(a plaintext HTTP/2 server sends its SETTINGS without waiting for the client's); ``real_peer`` maps a splice's source port, which gRPC
reports as the peer, back to the client's address while the splice lives; a silent connection is closed by the
listener's deadline."""

from __future__ import annotations

import asyncio

import pytest

from broker.grpc_v2.tls_front import PermissiveFront, real_peer
from harness.waiting import async_wait_until
from remoting.tls import server_context
from tests.factories import certs_or_skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return certs_or_skip(tmp_path_factory.mktemp("certs"), ["server"])


async def start_backend(greeting: bytes, seen: list):
    """A backend that greets at once, answers the first read with the peer it saw and the bytes, and stays open
    until its client closes."""

    async def serve(reader, writer):
        peer = writer.get_extra_info("peername")
        seen.append(peer)
        writer.write(greeting)
        data = await reader.read(100)
        writer.write(f"{peer[0]}:{peer[1]}|".encode() + data)
        await writer.drain()
        await reader.read()  # open until the client closes (through the front)
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_each_kind_reaches_its_backend_and_the_backend_may_speak_first(certs):
    seen_plain, seen_tls = [], []
    plain, plain_port = await start_backend(b"SETTINGS|", seen_plain)
    tls, tls_port = await start_backend(b"", seen_tls)
    front = PermissiveFront("127.0.0.1", 0, tls_port=tls_port, plain_port=plain_port,
                            context=server_context(certs.cert("server"), certs.key("server")),
                            handshake_timeout_s=1.0)
    port = await front.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PRI * HTTP/2.0")  # the front connects its backend on the client's first byte
        # the backend greets at once, before the front has linked the halves: nothing of it may be lost
        assert await asyncio.wait_for(reader.readexactly(9), 5) == b"SETTINGS|"
        answer = (await asyncio.wait_for(reader.read(200), 5)).decode()
        backend_seen, _, data = answer.partition("|")
        assert data == "PRI * HTTP/2.0"
        host, port_text = backend_seen.rsplit(":", 1)
        assert real_peer(host, int(port_text)) == writer.get_extra_info("sockname")[:2]  # the client, not the front
        writer.close()
        await writer.wait_closed()

        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w2.write(bytes([0x16, 0x03, 0x01]) + b"hello")  # a TLS record's first bytes go to the TLS backend as they are
        assert (await asyncio.wait_for(r2.read(200), 5)).endswith(bytes([0x16, 0x03, 0x01]) + b"hello")
        assert len(seen_tls) == 1 and len(seen_plain) == 1
        w2.close()
        await w2.wait_closed()
        await async_wait_until(lambda: not front._halves, 5, "the splices closed with their clients")  # noqa: SLF001
        assert real_peer(host, int(port_text)) == (host, int(port_text))  # forgotten once the splice closed
    finally:
        front.close()
        for server in (plain, tls):
            server.close()
            await server.wait_closed()


async def test_a_silent_connection_is_closed_by_the_deadline(certs):
    front = PermissiveFront("127.0.0.1", 0, tls_port=1, plain_port=1,
                            context=server_context(certs.cert("server"), certs.key("server")),
                            handshake_timeout_s=0.3)
    port = await front.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert front.listener.refused["tls_handshake_timeout"] == 1
        writer.close()
        await writer.wait_closed()
    finally:
        front.close()
