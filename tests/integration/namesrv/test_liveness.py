"""Brokers leave the route when they go silent (expiry scan) or when their keep-alive stream breaks (spec §2.4)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from remoting.channel import aio_channel
from remoting.codes import ResponseCode
from remoting.pb import namesrv_pb2, namesrv_pb2_grpc
from tests.integration.namesrv.conftest import Names, keepalive_stream, register_request, route_addrs, route_is
from tests.support.procs import REPO_ROOT, Namesrv
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration

EXPIRY_MS = 1500
SCAN_MS = 300


@contextlib.contextmanager
def keepalive_peer_process(namesrv_addr: str, broker_addr: str, out_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.namesrv.keepalive_peer", namesrv_addr, broker_addr],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(REPO_ROOT),
            env=env,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


async def test_broker_silent_beyond_the_expiry_is_dropped_while_a_pinging_one_stays(tmp_path):
    ns = Namesrv(tmp_path, brokerChannelExpiredTime=EXPIRY_MS, scanNotActiveBrokerInterval=SCAN_MS).start()
    channel = aio_channel(ns.addr)
    try:
        stub = namesrv_pb2_grpc.NameServerStub(channel)
        silent, pinging = Names(), Names()
        await stub.RegisterBroker(register_request(silent, topics=[silent.topic]), timeout=5)
        registered_at = time.monotonic()
        await stub.RegisterBroker(register_request(pinging, topics=[pinging.topic]), timeout=5)

        async with keepalive_stream(ns.addr, pinging.master_addr) as call:

            async def ping_forever():
                while True:
                    await asyncio.sleep(0.2)
                    await call.write(namesrv_pb2.KeepAliveRequest(broker_addr=pinging.master_addr))
                    await call.read()

            pinger = asyncio.ensure_future(ping_forever())
            try:
                await async_wait_until(
                    lambda: route_is(stub, silent.topic, None),
                    timeout_s=5,
                    err_msg=lambda: f"silent broker still routed after 5 s:\n{ns.log_tail()}",
                )
                silent_for_s = time.monotonic() - registered_at
                assert await route_addrs(stub, pinging.topic) == {0: pinging.master_addr}
            finally:
                pinger.cancel()
        assert silent_for_s >= EXPIRY_MS / 1000 - 0.05, f"dropped after {silent_for_s:.2f}s, before the expiry"
        assert f"broker {silent.master_addr} silent for" in ns.output()
    finally:
        await channel.close()
        ns.stop()


async def test_keepalive_stream_broken_by_a_killed_process_drops_the_broker_within_a_second(
    namesrv, stub, names, tmp_path
):
    await stub.RegisterBroker(register_request(names, topics=[names.topic]), timeout=5)
    await stub.RegisterBroker(register_request(names, slave=True), timeout=5)
    out = tmp_path / "peer.out"
    with keepalive_peer_process(namesrv.addr, names.master_addr, out) as peer:
        await async_wait_until(
            lambda: "open 0" in out.read_text(),
            timeout_s=10,
            err_msg=lambda: f"keep-alive peer did not open its stream: {out.read_text()!r}",
        )
        peer.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await async_wait_until(
            lambda: route_is(stub, names.topic, {1: names.slave_addr}),
            timeout_s=1.5,
            err_msg=lambda: f"master still routed after its keep-alive peer was killed:\n{namesrv.log_tail()}",
            interval_s=0.02,
        )
    assert time.monotonic() - killed_at < 1.5


async def test_old_stream_ending_keeps_a_broker_whose_newer_stream_is_open(namesrv, stub, names):
    await stub.RegisterBroker(register_request(names, topics=[names.topic]), timeout=5)
    async with keepalive_stream(namesrv.addr, names.master_addr) as old:
        async with keepalive_stream(namesrv.addr, names.master_addr) as new:
            old.cancel()
            await async_wait_until(
                lambda: re.search(rf"of {re.escape(names.master_addr)} ended \(.*\); a newer stream is open",
                                  namesrv.new_output()),
                timeout_s=5,
                err_msg=lambda: f"the nameserver never noticed the old stream ending:\n{namesrv.log_tail()}",
            )
            assert await route_addrs(stub, names.topic) == {0: names.master_addr}

            await new.done_writing()  # a clean close by the broker drops it too
            await async_wait_until(
                lambda: route_is(stub, names.topic, None),
                timeout_s=5,
                err_msg=lambda: f"broker still routed after its only stream closed:\n{namesrv.log_tail()}",
            )


async def test_keepalive_from_an_unregistered_broker_is_told_to_register(namesrv, names):
    async with keepalive_stream(namesrv.addr, names.master_addr) as call:
        assert call.first_response.code == ResponseCode.QUERY_NOT_FOUND
        assert "send RegisterBroker" in call.first_response.remark
