"""GetHAStatus of real processes through the admin service (what ``mqctl ha status`` shows).

Master side: per slave its broker address, brokerId, acked offset, lag and state OK / FALL_BEHIND / STALE /
DISCONNECTED, and the master's max offset; slave side: the master HA address, connected, replicated bytes.
"""

from __future__ import annotations

import pytest

from tests.integration.replication.helpers import SEND_OK, ha, send_batches, wait_caught_up
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

FALLBEHIND = 64 * 1024


async def test_ha_status_shows_ok_then_fall_behind_then_disconnected_then_ok_again(pair, admin):
    m, s, mc, sc = pair("broker-h", "ASYNC_MASTER", master_conf={"haSlaveFallbehindMax": FALLBEHIND})
    assert (await mc.create_topic("TH", 1)).code == 0
    assert {c for _, c in await send_batches(mc, "TH", 1, 5, 10, "h1")} == {SEND_OK}
    end = await wait_caught_up(mc, sc)

    async def one_slave(state: str | tuple[str, ...], lag: int | None = None):
        st = await admin.ha_status(m.addr)  # through the SDK's admin client, as mqctl does
        if len(st.slaves) != 1 or st.slaves[0].state not in ((state,) if isinstance(state, str) else state):
            return False
        x = st.slaves[0]
        if lag is not None and x.lag_bytes != lag:
            return False
        return st, x

    st, x = await async_wait_until(lambda: one_slave("OK", 0), 20, "slave OK with lag 0", 0.1)
    assert st.role == "ASYNC_MASTER" and st.commitlog_max_offset == end and st.in_sync_slave_count == 1
    assert x.broker_id == 1 and x.ack_offset == end and x.slave_addr == s.addr  # its broker address
    assert x.peer_addr.startswith("127.0.0.1:") and x.peer_addr != s.addr
    assert x.transfer_from == 0 and x.transferred_bytes == end and x.last_ack_timestamp > 0
    ss = await admin.ha_status(s.addr)
    assert ss.role == "SLAVE" and ss.connected and ss.master_ha_addr == m.ha_addr
    assert ss.replicated_bytes == end and ss.commitlog_max_offset == end and ss.last_read_timestamp > 0

    # frozen slave, master writes more than haSlaveFallbehindMax: FALL_BEHIND with the exact lag, or STALE
    # once the frozen slave missed a heartbeat (test_ha_stale.py waits for that)
    s.pause()
    try:
        await send_batches(mc, "TH", 1, 10, 30, "h2")
        new_end = (await ha(mc)).commitlog_max_offset
        assert new_end - end >= FALLBEHIND
        st, x = await async_wait_until(lambda: one_slave(("FALL_BEHIND", "STALE"), new_end - end), 20,
                                       "state FALL_BEHIND or STALE with the unacked bytes as lag", 0.1)
        assert x.ack_offset == end and st.commitlog_max_offset == new_end and st.in_sync_slave_count == 0
    finally:
        s.resume()
    await async_wait_until(lambda: one_slave("OK", 0), 20, "OK again after SIGCONT", 0.1)

    s.kill()  # the connection closes; the master keeps the slave listed as DISCONNECTED
    st, x = await async_wait_until(lambda: one_slave("DISCONNECTED"), 20, "state DISCONNECTED", 0.1)
    assert x.ack_offset == new_end and st.in_sync_slave_count == 0

    s.start(30)
    await async_wait_until(lambda: one_slave("OK", 0), 30, "OK after the slave's restart", 0.1)
    ss = await admin.ha_status(s.addr)
    assert ss.connected and ss.commitlog_max_offset == new_end
