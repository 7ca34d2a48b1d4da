"""The HA secret never leaves a broker, a live slave keeps its brokerId, silent sockets cannot lock a slave out
(issue 22 items 1 and 2), against real master and slave processes.

The attacker here is as strong as the issue's: for the brokerId tests it holds the cluster's real secret (the
harness's inline ``haAuthSecret``) and speaks the HA codec; for the slot test it keeps 100 silent connections
open from 20 loopback addresses, the slave's own among them, reopening each one the master closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import urllib.request

import pytest

from common.conf import SECRET_MARKER
from harness.ha_flood import SilentFlood
from harness.procs import TEST_HA_AUTH_SECRET, Broker
from harness.waiting import async_wait_until
from remoting import ha_codec, ha_handshake
from remoting.codes import RequestCode
from tests.integration.broker.rpc import BrokerClient, message
from tests.integration.replication.helpers import SEND_OK, ha, wait_caught_up, wait_slaves_ok

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

CLUSTER = "DefaultCluster"  # harness/procs.py's default


class Claimant:
    """An HA peer that holds the cluster's secret: hello, the proof, a report; then it reads what comes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = ha_codec.FrameDecoder(1 << 20)

    @classmethod
    async def claim(cls, addr: str, broker_name: str, broker_id: int = 1, report: int = 0) -> tuple[Claimant, list]:
        """Connect, authenticate as ``broker_id`` and report ``report``; returns the peer and the frames the master
        sent within 3 s (a Challenge, then heartbeat frames when served, or an ErrorFrame when refused)."""
        host, _, port = addr.rpartition(":")
        peer = cls(*await asyncio.open_connection(host, int(port)))
        hello = ha_handshake.encode_hello(broker_id=broker_id, cluster=CLUSTER, broker_name=broker_name,
                                          nonce=os.urandom(ha_handshake.NONCE_BYTES))
        peer.writer.write(hello)
        frames = await peer.frames(until=1)
        assert frames and isinstance(frames[0], ha_codec.Challenge) and frames[0].auth, frames
        peer.writer.write(ha_handshake.slave_proof(TEST_HA_AUTH_SECRET.encode(), hello, frames[0].nonce)
                          + ha_codec.encode_report(report))
        return peer, frames + await peer.frames(timeout_s=3.0)

    async def frames(self, until: int = 0, timeout_s: float = 10.0) -> list:
        out: list = []
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(timeout_s):
                while not (until and len(out) >= until):
                    data = await self.reader.read(1 << 16)
                    if not data:
                        break
                    self.decoder.feed(data)
                    out.extend(self.decoder.frames())
        return out

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
def claimants():
    opened: list[Claimant] = []

    async def claim(*args, **kw) -> tuple[Claimant, list]:
        peer, frames = await Claimant.claim(*args, **kw)
        opened.append(peer)
        return peer, frames

    yield claim
    for peer in opened:
        peer.close()


def scrape(broker: Broker) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5) as resp:
        return resp.read().decode()


async def send_one(mc: BrokerClient, topic: str, tag: str):
    return await mc.send(topic, 0, [message(tag.encode() * 20, UNIQ_KEY=tag)])


def refused(frames: list) -> bool:
    return bool(frames) and isinstance(frames[-1], ha_codec.ErrorFrame) and frames[-1].master_max == -1


# item 1: the secret ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["inline", "file"])
async def test_no_config_read_metric_status_or_log_line_shows_the_secret_or_its_file(how, tmp_path, pair):
    secret_file = tmp_path / "private-secret-dir" / "ha-auth-secret"
    secret_file.parent.mkdir()
    secret_file.write_text(TEST_HA_AUTH_SECRET + "\n")
    secret_file.chmod(0o600)
    key = "haAuthSecret" if how == "inline" else "haAuthSecretFile"
    conf = {key: TEST_HA_AUTH_SECRET if how == "inline" else str(secret_file)}
    m, s, mc, sc = pair(f"broker-{how}", "SYNC_MASTER", master_conf=conf, slave_conf=conf)
    await wait_slaves_ok(mc)
    forbidden = (TEST_HA_AUTH_SECRET, "private-secret-dir")
    for client, broker in ((mc, m), (sc, s)):
        for port in (broker.port,):
            async with BrokerClient(f"127.0.0.1:{port}") as plain:  # any caller, no credentials
                cfg = await plain.request(RequestCode.GET_BROKER_CONFIG)
                assert cfg.code == 0
                body = cfg.body_bytes().decode()
                assert f"{key}={SECRET_MARKER}\n" in body, body
                runtime = await plain.request(RequestCode.GET_BROKER_RUNTIME_INFO)
                status = await plain.request(RequestCode.GET_BROKER_HA_STATUS)
                update = await plain.request(RequestCode.UPDATE_BROKER_CONFIG,
                                             body=f"{key}={conf[key]}\n".encode())
            texts = {"GET_BROKER_CONFIG": body, "runtime info": runtime.body_bytes().decode(),
                     "haStatus": status.body_bytes().decode(), "UPDATE_BROKER_CONFIG remark": update.remark or "",
                     "/metrics": await asyncio.to_thread(scrape, broker), "log": broker.output()}
            assert update.code != 0, "guessing the secret right must not answer 'nothing changed'"
            for what, text in texts.items():
                for value in forbidden:
                    assert value not in text, f"{broker.name}-{broker.broker_id} {what} shows {value!r}"


# item 1: a live slave keeps its brokerId ---------------------------------------------------------------------

async def test_a_second_authenticated_claimant_of_broker_id_1_does_not_displace_the_live_slave(pair, claimants):
    m, s, mc, sc = pair("broker-dup", "SYNC_MASTER")
    assert (await mc.create_topic("TDUP", 1)).code == 0
    await wait_slaves_ok(mc)
    real = (await ha(mc)).slaves[0]
    for _ in range(2):
        peer, frames = await claimants(m.ha_addr, "broker-dup", 1, (await ha(mc)).commitlog_max_offset)
        assert refused(frames), f"the claimant was served: {frames}"
    st = await ha(mc)
    assert [(x.broker_id, x.slave_addr, x.state) for x in st.slaves] == [(1, real.slave_addr, "OK")], st.slaves
    for i in range(5):
        assert (await send_one(mc, "TDUP", f"after-{i}")).code == SEND_OK
    await wait_caught_up(mc, sc)  # the acks came from the real replica: it holds every byte
    metrics = await asyncio.to_thread(scrape, m)
    assert 'rocketmq_ha_duplicate_slave_claims_total{' in metrics
    line = next(x for x in metrics.splitlines() if x.startswith("rocketmq_ha_duplicate_slave_claims_total{"))
    assert 'slave_broker_id="1"' in line and line.endswith(" 2.0"), line
    assert "two live peers claim slave brokerId 1" in m.output()


async def test_a_frozen_slaves_link_is_taken_over_only_after_the_housekeeping_interval(pair, claimants):
    idle_ms = 3000
    conf = {"haHousekeepingInterval": idle_ms, "haSendHeartbeatInterval": 500}
    m, s, mc, sc = pair("broker-frz", "ASYNC_MASTER", master_conf=conf, slave_conf=conf)
    await wait_slaves_ok(mc)
    real = (await ha(mc)).slaves[0].slave_addr
    s.pause()  # SIGSTOP: the link stays open, nothing is read from it
    try:
        paused = time.monotonic()
        end = (await ha(mc)).commitlog_max_offset
        sent_at = time.monotonic()  # the master judges the claim when its proof arrives, right after this
        _, first = await claimants(m.ha_addr, "broker-frz", 1, end)
        if sent_at - paused < idle_ms / 1000 - 1.0:  # judged while the frozen link could still be alive
            assert refused(first), f"a link silent for less than haHousekeepingInterval was displaced: {first}"

        async def taken_over() -> str | bool:
            peer, frames = await claimants(m.ha_addr, "broker-frz", 1, (await ha(mc)).commitlog_max_offset)
            if refused(frames):
                return False
            assert any(isinstance(f, ha_codec.Frame) for f in frames), frames  # served: it was streamed to
            host, port = peer.writer.get_extra_info("sockname")[:2]
            return f"{host}:{port}"

        claimant = await async_wait_until(taken_over, 30, "a claimant served once the frozen link was dead", 0.5)
        rows = (await ha(mc)).slaves
        assert [(x.broker_id, x.slave_addr) for x in rows] == [(1, claimant)], (real, rows)
    finally:
        s.resume()


# item 2: silent sockets ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["kill-restart", "sigstop-sigcont"])
async def test_100_silent_sockets_do_not_keep_the_real_slave_from_reconnecting(fault, pair, connect):
    conf = {"haHousekeepingInterval": 3000, "haSendHeartbeatInterval": 500}
    m, s, mc, sc = pair(f"broker-{fault[:4]}", "SYNC_MASTER", master_conf={"slaveTimeout": 4000, **conf},
                        slave_conf=conf)
    assert (await mc.create_topic("TFLOOD", 1)).code == 0
    await wait_slaves_ok(mc)
    t0 = time.monotonic()
    hosts = tuple(f"127.0.0.{i}" for i in range(1, 21))  # 127.0.0.1 is the slave's own address
    async with SilentFlood(m.ha_addr, 100, hosts) as flood:
        if fault == "kill-restart":
            s.kill()
            await async_wait_until(lambda: _slave_state_is(mc, "DISCONNECTED"), 20, "the master saw the slave go")
            s.start()
        else:
            s.pause()
            await async_wait_until(lambda: _slave_state_is(mc, "DISCONNECTED"), 20, "the frozen link expired")
            s.resume()
        # about 3 s on a quiet machine (bench.attack_ha); a resumed slave's reconnects back off to 5 s, and with both
        # cores busy its handshakes can miss their 1 s / 3 s deadlines a few times
        await wait_slaves_ok(mc, timeout_s=60)
        codes = [(await send_one(mc, "TFLOOD", f"during-{i}")).code for i in range(10)]
        assert codes == [SEND_OK] * 10, codes
        assert flood.open >= 50, f"the flood held {flood.open} sockets: it must still be on"
    elapsed = time.monotonic() - t0
    lines = [x for x in m.output().splitlines() if "HA peer" in x]
    bound = 3 * (int(elapsed / 10) + 2)  # three rate-limited kinds, one line each per 10 s
    assert len(lines) <= bound, f"{len(lines)} refusal lines in {elapsed:.0f} s (bound {bound}):\n" + "\n".join(
        lines[:20])
    assert flood.connects > 100, "the master closed silent sockets to make room"


async def _slave_state_is(mc: BrokerClient, state: str) -> bool:
    rows = (await ha(mc)).slaves
    return bool(rows) and all(x.state == state for x in rows)
