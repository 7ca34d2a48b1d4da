"""Edge cases of the HA stream with real processes (DESIGN §3, spec §3.8, reliability.md F4).

The in-process versions (every error code, LAST_FILE, sendfile paths) are in tests/unit/ha/test_replication.py.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.integration.replication.helpers import (
    SEND_OK,
    SLAVE_NOT_AVAILABLE,
    SMALL_FILE,
    commitlog_files,
    commitlog_range,
    drain,
    ha,
    master,
    send_batches,
    slave,
    slave_states,
    wait_caught_up,
    wait_slave_knows_topic,
    wait_slaves_ok,
)
from harness.waiting import async_wait_until, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


async def test_an_empty_slave_copies_from_the_master_min_offset_after_old_files_were_deleted(
        tmp_path, namesrv, connect):
    m = master(tmp_path, namesrv, "broker-e", "ASYNC_MASTER")
    mc = connect(m.addr)
    assert (await mc.create_topic("TE", 2)).code == 0
    sent = await send_batches(mc, "TE", 2, 60, 20, "e", body_size=800)  # ~1.2 MB: 5 files of 256 KiB
    assert all(code == SEND_OK for _, code in sent)
    await mc.close()
    m.stop()
    files = commitlog_files(m)
    assert len(files) >= 5, files
    old = time.time() - 3 * 3600
    for name in files[:2]:  # the two oldest files expired (fileReservedTime=1 h)
        os.utime(m.store_dir / "commitlog" / name, (old, old))
    m = master(tmp_path, namesrv, "broker-e", "ASYNC_MASTER", listenPort=m.port, haListenPort=m.ha_port,
               fileReservedTime=1, deleteWhen=ALL_HOURS, cleanResourceInterval=1000)
    mc = connect(m.addr)

    async def old_files_gone() -> bool:
        return (await ha(mc)).commitlog_min_offset == 2 * SMALL_FILE

    await async_wait_until(old_files_gone, 30, "the master to delete its two expired commitlog files", 0.2)

    s = slave(tmp_path, namesrv, "broker-e", haMasterAddress=m.ha_addr)  # empty store
    sc = connect(s.addr)
    end = await wait_caught_up(mc, sc)
    st_m, st_s = await ha(mc), await ha(sc)
    assert st_s.commitlog_min_offset == st_m.commitlog_min_offset == 2 * SMALL_FILE
    holding = lambda b: [f for f in commitlog_files(b) if int(f) < end]  # files holding bytes, not a pre-allocated next one
    assert holding(s) == holding(m) == files[2:]
    assert commitlog_range(s, 2 * SMALL_FILE, end) == commitlog_range(m, 2 * SMALL_FILE, end)
    assert [x.transfer_from for x in (await ha(mc)).slaves] == [2 * SMALL_FILE]
    # the slave serves what the master still serves, at the same queue offsets
    await wait_slave_knows_topic(sc, "TE")
    for q in (0, 1):
        lows = [(await c.pull("g-e", "TE", q, 0)).min_offset for c in (mc, sc)]
        assert lows[0] > 0 and lows[0] == lows[1], lows  # both consume queues start at the master's min
        on_m, on_s = await mc.pull_all("g-e", "TE", q, lows[0]), await sc.pull_all("g-e", "TE", q, lows[0])
        assert on_m and [(x.queue_offset, x.body) for x in on_s] == [(x.queue_offset, x.body) for x in on_m]
        assert on_m[0].queue_offset == lows[0]


async def test_a_slave_ahead_of_a_wiped_master_is_refused_with_an_explicit_error_and_keeps_its_data(
        tmp_path, namesrv, connect, pair):
    m, s, mc, sc = pair("broker-w", "ASYNC_MASTER")
    assert (await mc.create_topic("TW", 1)).code == 0
    await send_batches(mc, "TW", 1, 10, 10, "w")
    end = await wait_caught_up(mc, sc)
    m.kill()
    await mc.close()
    # the master's disk is replaced: a new, empty master on the same ports
    fresh = master(tmp_path, namesrv, "broker-w", "ASYNC_MASTER", sub="m-new", listenPort=m.port,
                   haListenPort=m.ha_port)
    mc = connect(fresh.addr)
    wait_until(lambda: "SLAVE_AHEAD_OF_MASTER_MAX" in s.new_output(), 30,
               lambda: f"no explicit error in the slave log:\n{s.log_tail(20)}")
    line = next(x for x in s.new_output().splitlines() if "SLAVE_AHEAD_OF_MASTER_MAX" in x)
    assert "ERROR" in line and str(end) in line, line  # says what happened and at which offsets
    assert "SLAVE_AHEAD_OF_MASTER_MAX" in fresh.new_output() or "beyond the master's max" in fresh.new_output()
    assert (await ha(sc)).commitlog_max_offset == end  # nothing truncated or overwritten
    assert (await slave_states(mc)).get(1) != "OK"


async def test_a_killed_slave_never_lets_a_sync_master_answer_send_ok_and_catches_up_after_restart(connect, pair):
    m, s, mc, sc = pair("broker-k", "SYNC_MASTER")
    assert (await mc.create_topic("TK", 2)).code == 0
    await wait_slaves_ok(mc)
    before = await send_batches(mc, "TK", 2, 20, 10, "before")
    assert {c for _, c in before} == {SEND_OK}
    s.kill()  # SIGKILL: the master sees the HA connection close (a send that beats it waits, then times out)

    async def slave_gone() -> bool:
        return (await slave_states(mc)).get(1) in (None, "DISCONNECTED")

    await async_wait_until(slave_gone, 10, "the master to see its slave's HA connection close", 0.05)
    away = await send_batches(mc, "TK", 2, 40, 10, "away")
    assert {c for _, c in away} == {SLAVE_NOT_AVAILABLE}, "a SYNC_MASTER answered SEND_OK without its slave"
    s.start(30)
    sc = connect(s.addr)
    end = await wait_caught_up(mc, sc, 60)
    await wait_slaves_ok(mc)
    after = await send_batches(mc, "TK", 2, 5, 10, "after")
    assert {c for _, c in after} == {SEND_OK}
    end = await wait_caught_up(mc, sc)
    assert commitlog_range(s, 0, end) == commitlog_range(m, 0, end)
    await wait_slave_knows_topic(sc, "TK")
    on_s = await drain(sc, "TK", 2)
    assert sorted(x.properties["UNIQ_KEY"] for q in on_s for x in on_s[q]) == sorted(
        i for i, _ in before + away + after)
