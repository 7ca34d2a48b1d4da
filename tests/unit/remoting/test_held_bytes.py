"""The process's cap on what its connections hold (remoting.held_bytes), over real loopback sockets: the count
follows partial frames, requests being served and unread answers, returns to 0 when the connections close; past
the cap a large frame is refused and the largest holders are closed; a trickled frame meets its deadline."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from harness.waiting import async_wait_until
from remoting.client import RemotingClient
from remoting.connection import Limits
from remoting.frame_codec import RemotingCommand, encode_bytes, response_to
from remoting.held_bytes import HeldBytes
from remoting.server import RemotingServer

ECHO, HOLD, BIG = 1, 3, 4
MIB = 1024 * 1024


@pytest.fixture
async def capped():
    held = HeldBytes(4 * MIB, name="test")
    srv = RemotingServer("test", "127.0.0.1", 0, held_bytes=held,
                         limits=Limits(frame_timeout_s=1.0, write_high_water=256 << 10, stall_timeout_s=30))
    release = asyncio.Event()

    async def hold(conn, req):
        await release.wait()
        return response_to(req, 0)

    srv.register(ECHO, lambda conn, req: response_to(req, 0, body=req.body))
    srv.register(HOLD, hold)
    srv.register(BIG, lambda conn, req: response_to(req, 0, body=b"x" * (64 << 10)))
    await srv.start()
    yield srv, held, release
    release.set()
    await srv.stop(grace_s=1)


async def raw_peer(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1 << 20), 0.05) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_held_bytes_follow_partial_frames_and_return_to_zero_when_connections_close(capped):
    srv, held, _ = capped
    peers = [await raw_peer(srv.port) for _ in range(3)]
    for _, writer in peers:
        writer.write(struct.pack(">i", MIB - 4) + b"\0" * 1000)  # a 1 MiB frame announced, 1004 bytes sent
        await writer.drain()
    # each partial frame counts at its announced size: what the connection will hold once it is whole
    await async_wait_until(lambda: held.total == 3 * MIB, 2, lambda: f"held {held.total}")
    assert held.connections == 3
    for _, writer in peers:
        writer.close()
    await async_wait_until(lambda: held.total == 0 and held.connections == 0, 2, lambda: f"held {held.total}")


async def test_requests_being_served_count_until_answered(capped):
    srv, held, release = capped
    client = RemotingClient()
    try:
        body = b"b" * (100 << 10)
        pending = [asyncio.ensure_future(client.invoke(f"127.0.0.1:{srv.port}", RemotingCommand(HOLD, body=body), 5))
                   for _ in range(5)]
        await async_wait_until(lambda: held.total >= 5 * len(body), 2, lambda: f"held {held.total}")
        release.set()
        await asyncio.gather(*pending)
        await async_wait_until(lambda: held.total == 0, 3, lambda: f"held {held.total} after the answers")
    finally:
        await client.close()


async def test_a_large_frame_past_the_cap_is_refused_and_a_small_request_still_passes(capped):
    srv, held, _ = capped
    holders = [await raw_peer(srv.port) for _ in range(3)]
    for _, writer in holders:
        writer.write(struct.pack(">i", MIB + (MIB >> 1)))  # 1.5 MiB frames: two fit under 4 MiB, the third not
        await writer.drain()
    await async_wait_until(lambda: held.closes["frame_refused"] == 1, 2, lambda: f"closes {held.closes}")
    assert held.total <= held.cap
    refused = [r for r, _ in holders if await closed_by_server(r)]
    assert len(refused) == 1
    client = RemotingClient()
    try:  # a small request is never refused
        answer = await client.invoke(f"127.0.0.1:{srv.port}", RemotingCommand(ECHO, body=b"hi"), 5)
        assert answer.body == b"hi"
    finally:
        await client.close()
    for _, writer in holders:
        writer.close()
    await async_wait_until(lambda: held.total == 0, 2, lambda: f"held {held.total}")


async def test_a_trickled_frame_is_closed_at_its_deadline_though_each_byte_arrives(capped):
    srv, held, _ = capped
    reader, writer = await raw_peer(srv.port)
    writer.write(struct.pack(">i", 1000))
    for _ in range(30):  # one byte every 0.1 s: the idle timer would never fire, the 1 s frame deadline does
        if await closed_by_server(reader):
            break
        writer.write(b"\0")
        await writer.drain()
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the trickling peer was not closed")
    assert held.closes["frame_timeout"] == 1
    writer.close()
    await async_wait_until(lambda: held.total == 0, 2, lambda: f"held {held.total}")


async def test_frames_that_complete_in_time_are_served_one_after_another(capped):
    srv, held, _ = capped
    reader, writer = await raw_peer(srv.port)
    frame = encode_bytes(RemotingCommand(ECHO, opaque=7, body=b"z" * 5000))
    for _ in range(3):  # each frame in two halves 0.6 s apart: 1.2 s in all, but each whole within the 1 s deadline
        writer.write(frame[:2500])
        await writer.drain()
        await asyncio.sleep(0.6)
        writer.write(frame[2500:])
        await writer.drain()
        length = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 2))[0]
        await reader.readexactly(length)
    assert held.closes["frame_timeout"] == 0
    writer.close()


async def test_past_the_cap_the_largest_holder_of_unread_answers_is_closed(capped):
    srv, held, _ = capped
    socks = []
    request = encode_bytes(RemotingCommand(BIG, opaque=1))
    for n in (80, 80, 80):  # 64 KiB answers, 5 MiB asked by each peer, never read
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(request * n)
        socks.append(sock)
    await async_wait_until(lambda: held.closes["shed"] >= 1, 5, lambda: f"closes {held.closes}, held {held.total}")
    assert held.total <= held.cap
    assert 1 <= held.connections < 3  # the largest readers were closed until the rest fit, not every one
    for sock in socks:
        sock.close()
    await async_wait_until(lambda: held.total == 0, 2, lambda: f"held {held.total}")
