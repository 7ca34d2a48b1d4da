"""A frozen HA peer shows STALE in ``mqctl haStatus`` on the other end, and OK again once it runs (issue 15.3).

Real processes: a nameserver, an ASYNC_MASTER and its slave, with haSendHeartbeatInterval=500 ms (so a link is
STALE after 1.5 s of silence, broker/ha/status.py) and haHousekeepingInterval=120 s (so the connection is not
expired meanwhile: DISCONNECTED cannot stand in for STALE). One peer is frozen with SIGSTOP, the other's status
is polled through mqctl until it says STALE, then the peer is thawed and the status polled until OK.
"""

from __future__ import annotations

import pytest

from harness.waiting import wait_until
from tests.integration.ctl.cli import ok, ok_json
from tests.integration.replication.helpers import master, slave

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

HEARTBEAT_MS = 500
STALE_AFTER_MS = 1500  # stale_after_ms(500): one interval plus 1 s
WAIT_S = 60.0  # generous on a loaded 2-core box; far below haHousekeepingInterval
CONF = {"haSendHeartbeatInterval": HEARTBEAT_MS, "haHousekeepingInterval": 120_000}


def ha_json(ns, addr: str) -> dict:
    return ok_json("haStatus", "-n", ns.addr, "-b", addr)[0]


def slave_view(ns, s, state: str):
    report = ha_json(ns, s.addr)
    return report if report["state"] == state else False


def master_view(ns, m, state: str):
    report = ha_json(ns, m.addr)
    rows = report["slaves"]
    return rows[0] if len(rows) == 1 and rows[0]["state"] == state else False


def test_a_slave_shows_its_sigstopped_master_stale_then_ok_after_sigcont(tmp_path, namesrv):
    m = master(tmp_path, namesrv, "broker-st", "ASYNC_MASTER", **CONF)
    s = slave(tmp_path, namesrv, "broker-st", haMasterAddress=m.ha_addr, **CONF)
    wait_until(lambda: slave_view(namesrv, s, "OK"), WAIT_S, "the slave's link to its master OK", 0.2)
    m.pause()
    try:
        report = wait_until(lambda: slave_view(namesrv, s, "STALE"), WAIT_S, "the slave's view of the paused master "
                            "STALE", 0.2)
        assert report["connected"] is True  # the TCP connection is up: only the silence tells
        assert report["sinceLastReadMs"] > report["staleAfterMs"] == STALE_AFTER_MS
        lines = ok("haStatus", "-n", namesrv.addr, "-b", s.addr).stdout.splitlines()
        assert "#Status Stale" in lines and "#Connected true" in lines
    finally:
        m.resume()
    report = wait_until(lambda: slave_view(namesrv, s, "OK"), WAIT_S, "the slave's view OK after SIGCONT", 0.2)
    assert 0 <= report["sinceLastReadMs"] <= STALE_AFTER_MS


def test_a_master_shows_its_sigstopped_slave_stale_by_broker_address_then_ok_after_sigcont(tmp_path, namesrv):
    m = master(tmp_path, namesrv, "broker-st", "ASYNC_MASTER", **CONF)
    s = slave(tmp_path, namesrv, "broker-st", haMasterAddress=m.ha_addr, **CONF)
    row = wait_until(lambda: master_view(namesrv, m, "OK"), WAIT_S, "the master's row of its slave OK", 0.2)
    assert (row["slaveAddr"], row["brokerId"]) == (s.addr, 1)  # the slave's registered broker address
    assert row["haPeerAddr"] != s.addr and row["haPeerAddr"].startswith("127.0.0.1:")
    s.pause()
    try:
        row = wait_until(lambda: master_view(namesrv, m, "STALE"), WAIT_S, "the master's row of the paused slave "
                         "STALE", 0.2)
        assert row["slaveAddr"] == s.addr and row["sinceLastReadMs"] > STALE_AFTER_MS
        report = ha_json(namesrv, m.addr)
        assert report["inSyncSlaveNum"] == 0 and report["slaveNum"] == 1
        table = ok("haStatus", "-n", namesrv.addr, "-b", m.addr).stdout.splitlines()
        assert any(line.split()[:2] == [s.addr, "1"] and "Stale" in line.split() for line in table), table
    finally:
        s.resume()
    wait_until(lambda: master_view(namesrv, m, "OK"), WAIT_S, "the master's row OK after SIGCONT", 0.2)
