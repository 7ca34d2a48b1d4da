"""haStatus names slaves by their broker address and brokerId, shows the time since the last read, repeats with -i.

The shared four-broker cluster (conftest.py); STALE on a frozen peer is tests/integration/replication/
test_ha_stale.py (it pauses processes, which this shared cluster must not see).
"""

from __future__ import annotations

import pytest

from harness.waiting import wait_until
from tests.integration.ctl.cli import CLUSTER, ok, ok_json

pytestmark = pytest.mark.integration

WAIT_S = 30.0


def test_each_slave_row_is_the_registered_broker_address_and_id_with_the_ha_peer_in_json(cluster):
    registered = {(r["brokerName"], r["brokerId"]): r for r in ok_json("clusterList", "-n", cluster.namesrv_addr)}

    def rows_ok():
        reports = ok_json("haStatus", "-n", cluster.namesrv_addr, "-c", CLUSTER)
        rows = {r["masterAddr"]: r["slaves"] for r in reports}
        if not all(len(r) == 1 and r[0]["state"] == "OK" for r in rows.values()):
            return False
        return rows

    rows = wait_until(rows_ok, WAIT_S, "every master lists its one slave OK", 0.2)
    for name in ("broker-a", "broker-b"):
        row = rows[cluster.addr(name)][0]
        assert row["slaveAddr"] == cluster.addr(f"{name}-s") == registered[(name, 1)]["addr"]
        assert row["brokerId"] == 1
        assert row["haPeerAddr"] and row["haPeerAddr"] != row["slaveAddr"]  # the HA socket's ephemeral port
        assert row["sinceLastReadMs"] >= 0 and row["sinceLastRead"].endswith("s")
    table = ok("haStatus", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-a")).stdout.splitlines()
    slave_row = next(line.split() for line in table if line.startswith(cluster.addr("broker-a-s")))
    assert slave_row[1] == "1" and slave_row[5].endswith("s")  # BrokerId, SinceLastRead


def test_a_slave_report_shows_its_link_state_and_the_time_since_the_master_last_spoke(cluster):
    report = wait_until(lambda: (r := ok_json("haStatus", "-n", cluster.namesrv_addr, "-b",
                                              cluster.addr("broker-b-s"))[0])["state"] == "OK" and r,
                        WAIT_S, "broker-b-s's link to its master OK", 0.2)
    assert report["connected"] is True and report["sinceLastReadMs"] >= 0
    assert report["staleAfterMs"] == 7500  # the default haSendHeartbeatInterval, 5 s
    lines = ok("haStatus", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-b-s")).stdout.splitlines()
    assert "#Status OK" in lines
    assert any(line.startswith("#SinceLastRead ") and line.endswith("s") for line in lines)


def test_ha_status_repeats_with_interval_and_count(cluster):
    out = ok("haStatus", "-n", cluster.namesrv_addr, "-b", cluster.addr("broker-a"), "-i", "0.2", "--count", "2").stdout
    blocks = out.rstrip("\n").split("\n\n")
    assert len(blocks) == 2, out
    assert all(block.splitlines()[0] == f"#MasterAddr {cluster.addr('broker-a')}" for block in blocks)
    docs = ok("haStatus", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-i", "0.2", "--count", "2", "--json").stdout
    assert docs.count('"masterAddr"') == 4  # two masters, two reports
