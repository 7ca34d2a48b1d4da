"""Forged HA peers against real broker processes (issue 12 item 1, DESIGN §3).

Any TCP peer can reach a master's HA port. Only a slave that proves it holds the cluster's ``haAuthSecret`` may
count toward a SYNC_MASTER's SEND_OK, replace a live slave connection, learn the master's offsets or appear in
``haStatus``. The peers here are raw sockets speaking the HA codec, as an attacker would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from remoting import ha_codec, ha_handshake
from tests.integration.broker.rpc import BrokerClient, message
from tests.integration.replication.helpers import (
    FLUSH_SLAVE_TIMEOUT,
    SEND_OK,
    ha,
    master,
    slave_states,
    wait_slaves_ok,
)
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

CLUSTER = "DefaultCluster"  # harness/procs.py's default


class ForgedPeer:
    """A raw HA client that never knew the secret: it speaks the codec but can prove nothing."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, addr: str) -> ForgedPeer:
        host, _, port = addr.rpartition(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    def hello(self, broker_name: str, broker_id: int, cluster: str = CLUSTER) -> None:
        self.writer.write(ha_handshake.encode_hello(broker_id=broker_id, cluster=cluster, broker_name=broker_name,
                                                    nonce=os.urandom(ha_handshake.NONCE_BYTES)))

    def report(self, offset: int) -> None:
        self.writer.write(ha_codec.encode_report(offset))

    async def received(self, timeout_s: float = 10.0) -> bytes:
        """Everything the master sends until it closes (or ``timeout_s``)."""
        out = bytearray()
        try:
            async with asyncio.timeout(timeout_s):
                while data := await self.reader.read(1 << 16):
                    out += data
        except (TimeoutError, ConnectionError):
            pass
        return bytes(out)

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def forged():
    """``await forged(addr)``: a ForgedPeer connected to ``addr``, closed at teardown."""
    peers: list[ForgedPeer] = []

    async def connect_peer(addr: str) -> ForgedPeer:
        peers.append(await ForgedPeer.connect(addr))
        return peers[-1]

    yield connect_peer
    for peer in peers:
        peer.close()
        with contextlib.suppress(ConnectionError):
            await peer.writer.wait_closed()


async def send_one(mc: BrokerClient, topic: str, tag: str):
    return await mc.send(topic, 0, [message(tag.encode() * 20, UNIQ_KEY=tag)])


@pytest.mark.parametrize("claimed_id", [1, 2])
async def test_a_forged_peer_cannot_release_a_sync_send_while_the_real_slave_is_frozen(claimed_id, forged, pair):
    m, s, mc, _ = pair("broker-f", "SYNC_MASTER", master_conf={"slaveTimeout": 4000})
    assert (await mc.create_topic("TF", 1)).code == 0
    await wait_slaves_ok(mc)
    assert (await send_one(mc, "TF", "before")).code == SEND_OK
    before = (await ha(mc)).commitlog_max_offset
    s.pause()
    pending = asyncio.create_task(send_one(mc, "TF", "during"))

    async def appended() -> int | bool:
        end = (await ha(mc)).commitlog_max_offset  # what an attacker reads from the admin port
        return end if end > before else False

    end = await async_wait_until(appended, 10, "the pending SYNC send appended on the master", 0.02)
    for offset in (end, before):  # the pending batch's end, and the slave's last real ack
        peer = await forged(m.ha_addr)
        peer.hello("broker-f", claimed_id)
        peer.report(offset)
    resp = await pending
    assert resp.code == FLUSH_SLAVE_TIMEOUT, f"forged ack released the send: code {resp.code} {resp.remark}"


async def test_a_second_connection_claiming_broker_id_1_does_not_displace_the_live_authenticated_slave(forged, pair):
    m, s, mc, sc = pair("broker-d", "SYNC_MASTER")
    assert (await mc.create_topic("TD", 1)).code == 0
    await wait_slaves_ok(mc)
    real = (await ha(mc)).slaves[0]
    peer = await forged(m.ha_addr)
    peer.hello("broker-d", 1)
    peer.report((await ha(mc)).commitlog_max_offset)
    await peer.received()  # the master has judged the claim once this returns (closed, or 10 s of silence)
    peer.close()
    st = await ha(mc)
    assert [(x.broker_id, x.slave_addr, x.state) for x in st.slaves] == [(1, real.slave_addr, "OK")], st.slaves
    assert (await ha(sc)).connected
    assert (await send_one(mc, "TD", "after")).code == SEND_OK


async def test_an_unauthenticated_peer_learns_no_offsets(tmp_path, namesrv, connect, forged):
    m = master(tmp_path, namesrv, "broker-o", "SYNC_MASTER")
    mc = connect(m.addr)
    assert (await mc.create_topic("TO", 1)).code == 0
    await send_one(mc, "TO", "x")  # SLAVE_NOT_AVAILABLE, but stored: the max offset is not 0
    assert (await ha(mc)).commitlog_max_offset > 0
    attempts = {
        "bare offsets (RocketMQ 4.x slave)": lambda p: p.report(10**12),
        "garbage": lambda p: p.writer.write(b"GET / HTTP/1.1\r\n\r\n" + bytes(64)),
        "wrong brokerName": lambda p: p.hello("broker-x", 1),
        "wrong cluster": lambda p: p.hello("broker-o", 1, cluster="Other"),
        "brokerId 0": lambda p: p.hello("broker-o", 0),
        "a hello and no proof": lambda p: (p.hello("broker-o", 1), p.report(0)),
    }
    for what, act in attempts.items():
        peer = await forged(m.ha_addr)
        act(peer)
        data = await peer.received()
        peer.close()
        frames, _ = ha_codec.parse_frames(memoryview(data), 0, len(data), 32 * 1024)
        assert not [f for f in frames if isinstance(f, ha_codec.Frame)], f"{what}: the master streamed data"
        errors = [f for f in frames if isinstance(f, ha_codec.ErrorFrame)]
        assert all(e.master_min == e.master_max == e.phy_offset == -1 for e in errors), f"{what}: {errors}"


async def test_refused_peers_never_show_in_ha_status_and_departed_slaves_leave_it_within_the_bound(forged, pair):
    keep_ms = 2000
    m, s, mc, _ = pair("broker-r", "ASYNC_MASTER", master_conf={"haDisconnectedSlaveKeepInterval": keep_ms})
    await wait_slaves_ok(mc)
    end = (await ha(mc)).commitlog_max_offset
    peers = [await forged(m.ha_addr) for _ in range(2, 12)]
    for broker_id, peer in enumerate(peers, start=2):
        peer.hello("broker-r", broker_id)
        peer.report(end)
    for peer in peers:
        await peer.received(5)
    assert await slave_states(mc) == {1: "OK"}
    s.kill()
    await async_wait_until(lambda: _states_are(mc, {1: "DISCONNECTED"}), 20, "the killed slave shown DISCONNECTED")
    await async_wait_until(lambda: _states_are(mc, {}), 30, "the departed slave's row expired")


async def _states_are(mc: BrokerClient, want: dict[int, str]) -> bool:
    return await slave_states(mc) == want
