"""Connections over real loopback sockets: matching, oneway, unknown codes, bad frames and bounded buffers."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from remoting.client import RemotingClient
from remoting.codes import ResponseCode
from remoting.connection import Limits
from remoting.errors import RemotingClosedError, RemotingConnectError, RemotingTimeoutError
from remoting.frame_codec import FrameDecoder, RemotingCommand, decode, encode_bytes, response_to
from remoting.headers import Fields
from remoting.server import RemotingServer
from harness.hanging_port import hanging_port
from harness.waiting import async_wait_until

ECHO, HOLD, BIG, NEEDS_INT, BOOM, PARK = 1, 3, 4, 5, 6, 7


@pytest.fixture
async def server():
    srv = RemotingServer(
        "test-server",
        "127.0.0.1",
        0,
        limits=Limits(max_requests=8, max_parked=16, write_hard_cap=2 << 20, write_high_water=256 << 10,
                      stall_timeout_s=2),
    )
    release = asyncio.Event()
    seen: list[int] = []

    def echo(conn, req):
        seen.append(req.code)
        return response_to(req, 0, ext=req.ext, body=req.body)

    async def hold(conn, req):
        await release.wait()
        return response_to(req, 0, remark="released")

    async def park(conn, req):  # a held pull: waits for data, not for work
        async with conn.parked():
            await release.wait()
        return response_to(req, 0, remark="released")

    def big(conn, req):
        return response_to(req, 0, body=b"x" * (256 << 10))

    def needs_int(conn, req):
        Fields(req.ext, "test request").req_int("n")
        return response_to(req, 0)

    for code, fn in ((ECHO, echo), (HOLD, hold), (BIG, big), (NEEDS_INT, needs_int), (PARK, park)):
        srv.register(code, fn)
    await srv.start()
    srv.release = release  # type: ignore[attr-defined]
    srv.seen = seen  # type: ignore[attr-defined]
    yield srv
    release.set()
    await srv.stop(grace_s=1)


@pytest.fixture
async def client():
    cli = RemotingClient()
    yield cli
    await cli.close()


def addr(srv):
    return f"127.0.0.1:{srv.port}"


async def test_answers_are_matched_by_opaque_and_a_slow_request_does_not_block_others(server, client):
    slow = asyncio.ensure_future(client.invoke(addr(server), RemotingCommand(HOLD), 10))
    fast = await client.invoke(addr(server), RemotingCommand(ECHO, ext={"k": "v"}, body=b"b"), 10)
    assert fast.ext == {"k": "v"} and fast.body == b"b" and not slow.done()  # the held request is still running
    server.release.set()
    assert (await slow).remark == "released"


async def test_unknown_code_is_answered_not_supported_with_a_remark(server, client):
    resp = await client.invoke(addr(server), RemotingCommand(4242), 3)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in resp.remark


async def test_bad_header_field_gets_invalid_parameter_naming_the_field(server, client):
    resp = await client.invoke(addr(server), RemotingCommand(NEEDS_INT, ext={"n": "٣"}), 3)
    assert resp.code == ResponseCode.INVALID_PARAMETER and "n=" in resp.remark


async def test_a_failing_processor_is_answered_1_and_logs_at_most_one_traceback_per_interval(server, client, caplog):
    def boom(conn, req):
        raise ValueError("boom")

    server.register(BOOM, boom)
    for _ in range(20):
        resp = await client.invoke(addr(server), RemotingCommand(BOOM), 3)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "ValueError: boom" in resp.remark
    tracebacks = [r for r in caplog.records if r.exc_info and f"request code {BOOM}" in r.getMessage()]
    assert len(tracebacks) <= 1, "a peer repeating a failing request must not write a traceback each time"


async def test_closing_a_client_ends_a_connect_that_hangs_so_no_task_outlives_it():
    """A peer whose accept queue is full drops the SYN (as a partitioned host does): the connect hangs."""
    with hanging_port() as port:
        cli = RemotingClient(connect_timeout_s=30)
        call = asyncio.ensure_future(cli.invoke(f"127.0.0.1:{port}", RemotingCommand(ECHO), 30))
        addr = f"127.0.0.1:{port}"
        await async_wait_until(lambda: addr in cli.connecting, 5, "the connect to start")
        assert not call.done(), "the connect was expected to hang on the full accept queue"
        call.cancel()
        await cli.close()
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
        assert not left, f"tasks outlived the closed client: {left}"


async def test_oneway_is_served_and_not_answered(server, client):
    conn = await client.connection(addr(server))
    conn.invoke_oneway(RemotingCommand(ECHO))
    await async_wait_until(lambda: server.seen == [ECHO], 3, "the oneway request was not served")
    resp = await conn.invoke(RemotingCommand(ECHO), 3)  # the next answer is the next request's, nothing stray
    assert resp.opaque == 2 and conn.waiting == 0


async def test_timeout_then_the_late_answer_is_dropped(server, client):
    with pytest.raises(RemotingTimeoutError):
        await client.invoke(addr(server), RemotingCommand(HOLD), 0.05)
    server.release.set()  # the answer comes after the caller gave up
    assert (await client.invoke(addr(server), RemotingCommand(ECHO), 3)).code == 0


async def test_malformed_frame_closes_only_that_connection(server, client):
    good = await client.connection(addr(server))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(struct.pack(">ii", 12, 8) + b"not json")
    assert await asyncio.wait_for(reader.read(), 3) == b""  # closed, no answer
    writer.close()
    assert (await good.invoke(RemotingCommand(ECHO), 3)).code == 0


async def test_nested_ext_fields_are_answered_and_the_connection_stays(server, client):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    header = b'{"code":1,"opaque":5,"flag":0,"extFields":{"k":{"nested":1}}}'
    writer.write(struct.pack(">ii", 4 + len(header), len(header)) + header)
    (frame,) = FrameDecoder().feed(await asyncio.wait_for(reader.read(65536), 3))
    resp = decode(frame)
    assert (resp.code, resp.opaque, resp.flag) == (
        ResponseCode.INVALID_PARAMETER,
        5,
        1,
    ) and "strings or numbers" in resp.remark
    assert server.seen == []  # not served
    writer.close()


async def test_closing_fails_waiting_callers(server, client):
    conn = await client.connection(addr(server))
    held = asyncio.ensure_future(conn.invoke(RemotingCommand(HOLD), 5))
    await async_wait_until(lambda: any(c.serving for c in server.connections), 3, "hold not being served")
    for c in list(server.connections):
        c.close("test")
    with pytest.raises(RemotingClosedError):
        await held
    # the next call reconnects
    assert (await client.invoke(addr(server), RemotingCommand(ECHO), 3)).code == 0


async def test_stop_closes_an_idle_connection_at_once_instead_of_waiting_out_the_grace(server, client):
    conn = await client.connection(addr(server))
    assert (await conn.invoke(RemotingCommand(ECHO), 3)).code == 0  # open, registered, idle: nothing in service
    # an hour's grace: if the idle connection held the stop up, the stop would not return within the test's bound
    await asyncio.wait_for(server.stop(grace_s=3600), 30)
    await asyncio.wait_for(conn.closed, 30)  # the server closed it; the client saw the close


async def test_in_flight_cap_stops_reading_until_requests_finish(server, client):
    conn = await client.connection(addr(server))
    held = [asyncio.ensure_future(conn.invoke(RemotingCommand(HOLD), 10)) for _ in range(8)]
    echo = asyncio.ensure_future(conn.invoke(RemotingCommand(ECHO), 10))
    await async_wait_until(lambda: sum(c.serving for c in server.connections) == 8, 3, "8 holds not in service")
    await asyncio.sleep(0)  # let the echo reach the socket
    assert not echo.done() and server.seen == []  # the 9th request waits in TCP, unread
    server.release.set()
    assert (await echo).code == 0
    assert [r.code for r in await asyncio.gather(*held)] == [0] * 8


async def test_requests_waiting_for_data_do_not_count_toward_the_cap_up_to_max_parked(server, client):
    """A consumer keeps one held pull per queue on one connection: 16 parked ones (max_parked) leave all 8 slots
    (max_requests) to the connection's other requests; the 17th parked one counts like any request."""
    conn = await client.connection(addr(server))
    parked = [asyncio.ensure_future(conn.invoke(RemotingCommand(PARK), 10)) for _ in range(16)]
    await async_wait_until(lambda: sum(c.serving for c in server.connections) == 16, 3, "16 parked requests")
    assert (await conn.invoke(RemotingCommand(ECHO), 3)).code == 0  # served beside them
    beyond = [asyncio.ensure_future(conn.invoke(RemotingCommand(PARK), 10)) for _ in range(8)]
    await async_wait_until(lambda: sum(c.serving for c in server.connections) == 24, 3, "8 more parked")
    echo = asyncio.ensure_future(conn.invoke(RemotingCommand(ECHO), 10))
    await asyncio.sleep(0)  # let the echo reach the socket
    assert not echo.done() and server.seen == [ECHO]  # those 8 hold the 8 slots: the next one waits in TCP, unread
    server.release.set()
    assert (await echo).code == 0
    assert [r.code for r in await asyncio.gather(*parked, *beyond)] == [0] * 24


async def test_a_peer_that_never_reads_is_bounded_then_disconnected(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    request = encode_bytes(RemotingCommand(BIG, body=b"r" * (64 << 10)))
    loop = asyncio.get_running_loop()
    peak = 0
    sent = 0
    try:
        for _ in range(2000):  # 128 MiB of requests asking for 500 MiB of answers; reads none of them
            try:
                await asyncio.wait_for(loop.sock_sendall(sock, request), 0.2)
                sent += 1
            except (TimeoutError, OSError):
                break
            peak = max([peak] + [c.buffered_bytes() for c in server.connections])
        await async_wait_until(lambda: not server.connections, 10, "the non-reading peer was not disconnected")
    finally:
        sock.close()
    # one connection never held more than the write cap plus one answer plus in-flight requests
    assert peak <= (2 << 20) + (256 << 10) + 8 * len(request) + (256 << 10)  # + one read of unserved frames
    assert sent < 2000  # backpressure reached the sender


async def test_large_frames_decode_across_reads():
    dec = FrameDecoder()
    raw = encode_bytes(RemotingCommand(ECHO, body=b"z" * 100_000))
    frames = [f for i in range(0, len(raw), 1000) for f in dec.feed(raw[i : i + 1000])]
    assert decode(frames[0]).body == b"z" * 100_000


async def test_a_processor_may_answer_through_a_future_without_a_task(server, client):
    """A grouped send answers by a future's callback: answered when it completes, counted as served until then,
    and an exception set on it is answered SYSTEM_ERROR like a failing coroutine."""
    futures: list[tuple[RemotingCommand, asyncio.Future]] = []

    def later(conn, req):
        fut = asyncio.get_running_loop().create_future()
        futures.append((req, fut))
        return fut

    server.register(7, later)
    first = asyncio.ensure_future(client.invoke(addr(server), RemotingCommand(7), 10))
    second = asyncio.ensure_future(client.invoke(addr(server), RemotingCommand(7), 10))
    await async_wait_until(lambda: len(futures) == 2, 5, "both requests reached the processor")
    conn = next(iter(server.connections))
    assert conn.serving == 2 and not first.done()
    (req0, fut0), (_, fut1) = futures
    fut0.set_result(response_to(req0, 0, remark="later"))
    fut1.set_exception(ValueError("broken"))
    answers = await asyncio.gather(first, second)
    assert {a.code for a in answers} == {0, ResponseCode.SYSTEM_ERROR}
    assert any("ValueError: broken" in (a.remark or "") for a in answers)
    await async_wait_until(lambda: conn.serving == 0, 5, "the served futures were released")


async def test_a_deferred_answer_is_written_when_resolved_and_dropped_after_the_close(server, client):
    """A grouped single send answers through a DeferredAnswer: written as soon as it is resolved, counted as
    served until then; one resolved after its connection closed is dropped."""
    from remoting.connection import DeferredAnswer

    pending: list[tuple[RemotingCommand, DeferredAnswer]] = []

    def deferred(conn, req):
        answer = DeferredAnswer()
        pending.append((req, answer))
        return answer

    server.register(8, deferred)
    call = asyncio.ensure_future(client.invoke(addr(server), RemotingCommand(8), 10))
    await async_wait_until(lambda: len(pending) == 1, 5, "the request reached the processor")
    conn = next(iter(server.connections))
    assert conn.serving == 1 and not call.done()
    req, answer = pending[0]
    answer.resolve(response_to(req, 0, remark="deferred"))
    assert (await call).remark == "deferred"
    await async_wait_until(lambda: conn.serving == 0, 5, "the answered request was released")
    stuck = asyncio.ensure_future(client.invoke(addr(server), RemotingCommand(8), 10))
    await async_wait_until(lambda: len(pending) == 2, 5, "the second request reached the processor")
    await client.close()
    await async_wait_until(lambda: pending[1][1].cancelled, 5, "the close cancelled the deferred answer")
    pending[1][1].resolve(response_to(pending[1][0], 0))  # nowhere to go: dropped, nothing raised
    with pytest.raises(RemotingClosedError):
        await stuck


def test_a_deferred_answer_resolved_before_it_is_taken_is_delivered_on_bind():
    from remoting.connection import DeferredAnswer

    got = []
    answer = DeferredAnswer()
    answer.resolve("early")
    answer.resolve("twice")  # only the first counts
    answer.bind(got.append)
    assert got == ["early"]


async def test_an_address_whose_connect_hung_gets_the_short_wait_next_time():
    with hanging_port() as port:
        cli = RemotingClient(connect_timeout_s=0.6, reconnect_timeout_s=0.1)
        addr = f"127.0.0.1:{port}"
        try:
            for wait in ("0.6", "0.1"):
                with pytest.raises(RemotingConnectError) as err:
                    await cli.invoke(addr, RemotingCommand(ECHO), 5)
                assert f"no answer to connect within {wait} s" in str(err.value)
        finally:
            await cli.close()


async def test_an_address_whose_connection_was_lost_gets_the_short_wait_and_a_good_one_the_full_wait():
    """A killed container's address: the connection closes, then SYNs to it vanish (the new master is elsewhere)."""
    server = RemotingServer("lost", "127.0.0.1", 0)
    server.register(ECHO, lambda conn, cmd: response_to(cmd, ResponseCode.SUCCESS))
    port = await server.start()
    addr = f"127.0.0.1:{port}"
    cli = RemotingClient(connect_timeout_s=0.6, reconnect_timeout_s=0.1)
    try:
        assert (await cli.invoke(addr, RemotingCommand(ECHO), 5)).code == ResponseCode.SUCCESS
        await server.stop(0.1)
        await async_wait_until(lambda: cli.cached(addr) is None, 5, "the client to see its connection closed")
        with hanging_port(port=port):
            with pytest.raises(RemotingConnectError) as err:
                await cli.invoke(addr, RemotingCommand(ECHO), 5)
        assert "no answer to connect within 0.1 s" in str(err.value)
        with hanging_port() as other:  # an address this client never lost waits the full connect timeout
            with pytest.raises(RemotingConnectError) as err:
                await cli.invoke(f"127.0.0.1:{other}", RemotingCommand(ECHO), 5)
        assert "no answer to connect within 0.6 s" in str(err.value)
    finally:
        await cli.close()
