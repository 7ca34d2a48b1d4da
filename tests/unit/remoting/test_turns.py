"""A peer that pipelines thousands of requests in one write takes turns with the other peers: the server serves
``FRAMES_PER_TURN`` of its frames, then lets every callback already waiting on the loop run (another peer's request
among them) before it goes on. Before, one read's frames were all served in one go (about 2,500 route queries held a
nameserver's loop for over a second under attack)."""

from __future__ import annotations

import asyncio

from remoting.connection import FRAMES_PER_TURN
from remoting.frame_codec import RemotingCommand, encode_bytes, response_to
from remoting.server import RemotingServer

CODE = 7
FLOOD = 2000


async def test_a_pipelining_peer_lets_another_peer_in_between_its_frames():
    served: list[str] = []

    def handler(conn, req):
        served.append(req.ext["who"])
        return response_to(req, 0)

    srv = RemotingServer("test", "127.0.0.1", 0)
    srv.register(CODE, handler)
    await srv.start()
    try:
        (fr, fw), (qr, qw) = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(2)]
        flood = b"".join(encode_bytes(RemotingCommand(CODE, opaque=i, ext={"who": "flood"})) for i in range(FLOOD))
        fw.write(flood)
        await fw.drain()
        for _ in range(100):  # until the server has started on the flood: its first frames are served
            if served:
                break
            await asyncio.sleep(0.001)
        qw.write(encode_bytes(RemotingCommand(CODE, opaque=1, ext={"who": "quiet"})))
        await qw.drain()
        for _ in range(5000):
            if len(served) == FLOOD + 1:
                break
            await asyncio.sleep(0.001)
        assert len(served) == FLOOD + 1
        position = served.index("quiet")
        assert position < FLOOD, "the quiet peer waited for the whole flood"
        for w in (fw, qw):
            w.close()
    finally:
        await srv.stop(grace_s=1)

