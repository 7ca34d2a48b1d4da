"""HAService.status() on real sockets: slaves named by their broker address, silence turns a link STALE.

The process-level version (SIGSTOPped brokers, mqctl) is tests/integration/replication/test_ha_stale.py.
"""

from __future__ import annotations

import pytest

from broker.config import BrokerRole
from harness.waiting import async_wait_until
from remoting import ha_codec
from tests.unit.ha import harness as h

pytestmark = pytest.mark.timeout(60)

HEARTBEAT_MS = 200  # stale_after_ms(200) = 1.2 s


def _local_addr(peer: h.RawPeer) -> str:
    host, port = peer.writer.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


def one_slave(node: h.Node, state: str):
    rows = node.ha.status().slaves
    return rows[0] if len(rows) == 1 and rows[0].state == state else False


async def test_a_slave_is_named_by_its_broker_address_with_the_ha_peer_kept_apart(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    s = await h.slave(tmp_path / "s", m)
    try:
        row = await async_wait_until(lambda: one_slave(m, "OK"), 10, "the slave listed OK")
        assert row.addr == s.settings.broker.broker_addr and row.broker_id == 1
        assert row.peer_addr.startswith("127.0.0.1:") and row.peer_addr != row.addr
        body = m.ha.status().to_json()
        conn = body["haConnectionInfo"][0]
        assert (conn["addr"], conn["haPeerAddr"], conn["brokerId"]) == (row.addr, row.peer_addr, 1)
        assert conn["sinceLastReadMs"] >= 0 and conn["lastReadTimestamp"] > 0
        assert body["staleAfterMs"] == 7500  # the default haSendHeartbeatInterval, 5 s
        client = s.ha.status().client
        assert client.state == "OK" and client.since_last_read_ms >= 0 and client.connected
    finally:
        await s.stop()
        await m.stop()


async def test_a_slave_that_sends_no_broker_address_is_named_by_its_ha_peer(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER)
    peer = await h.RawPeer.connect(m.ha_addr)
    try:
        await peer.handshake()  # the hello of a pyrmq slave from before the ADDR flag
        peer.send(ha_codec.encode_report(0))
        row = await async_wait_until(lambda: one_slave(m, "OK"), 10, "the raw peer listed OK")
        assert row.addr == row.peer_addr == _local_addr(peer)
    finally:
        peer.close()
        await m.stop()


async def test_a_silent_slave_turns_stale_on_the_master_and_ok_when_it_reports_again(tmp_path):
    m = await h.master(tmp_path / "m", BrokerRole.ASYNC_MASTER, ha_send_heartbeat_interval=HEARTBEAT_MS)
    peer = await h.RawPeer.connect(m.ha_addr)
    try:
        await peer.handshake()
        peer.send(ha_codec.encode_report(0))
        await async_wait_until(lambda: one_slave(m, "OK"), 10, "the peer listed OK")
        # the peer says nothing more (a frozen slave): STALE once 1.2 s passed without a report, still connected
        row = await async_wait_until(lambda: one_slave(m, "STALE"), 10, "the silent peer listed STALE")
        assert row.since_last_read_ms > m.ha.status().stale_after_ms == 1200
        assert row.connected and not row.in_sync and m.ha.status().in_sync_slave_nums == 0
        peer.send(ha_codec.encode_report(0))  # a heartbeat report
        await async_wait_until(lambda: one_slave(m, "OK"), 10, "the peer OK again after reporting")
    finally:
        peer.close()
        await m.stop()


def test_the_sdk_reads_back_names_silence_and_states_as_the_broker_writes_them():
    from broker.ha.status import HAStatus, MasterLinkStatus, SlaveLinkStatus
    from client.admin_bodies import parse_ha_status
    from remoting import fastjson

    row = SlaveLinkStatus("10.0.0.5:10911", 2, 900, 100, "STALE", 0, 900, 0, 1234, peer_addr="172.20.0.5:51360",
                          last_read_timestamp=1300, since_last_read_ms=8200)
    master_side = parse_ha_status(fastjson.dumps(HAStatus("SYNC_MASTER", 1000, 0, (row,), stale_after_ms=7500)
                                                 .to_json()))
    got = master_side.slaves[0]
    assert (got.slave_addr, got.broker_id, got.peer_addr, got.state) == ("10.0.0.5:10911", 2, "172.20.0.5:51360",
                                                                         "STALE")
    assert (got.since_last_read_ms, got.last_read_timestamp, master_side.stale_after_ms) == (8200, 1300, 7500)
    assert master_side.in_sync_slave_count == 0
    link = MasterLinkStatus("10.0.0.1:10912", True, 500, since_last_read_ms=9000, state="STALE")
    slave_side = parse_ha_status(fastjson.dumps(HAStatus("SLAVE", 500, 0, client=link, stale_after_ms=7500).to_json()))
    assert (slave_side.connected, slave_side.link_state, slave_side.since_last_read_ms) == (True, "STALE", 9000)
