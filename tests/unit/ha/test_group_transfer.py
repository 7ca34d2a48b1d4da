"""GroupTransfer: many concurrent SYNC puts share a few acks; no slave -> at once; silence -> timeout."""

from __future__ import annotations

import asyncio
import time

from broker.ha.group_transfer import GroupTransfer
from broker.store.types import PutStatus


def make(connected: int = 1, timeout_ms: int = 3000, fallbehind: int = 1 << 28) -> GroupTransfer:
    return GroupTransfer(broker_name="broker-a", ha_port=10912, slave_timeout_ms=timeout_ms,
                         fallbehind_max=fallbehind, connected_slaves=lambda: connected)


async def test_a_thousand_waiters_are_released_in_offset_order_by_three_acks():
    gt = make()
    offsets = list(range(100, 100_100, 100))
    tasks = [asyncio.create_task(gt.wait(o)) for o in offsets]
    await asyncio.sleep(0)  # every waiter is queued
    assert gt.pending == 1000
    gt.on_ack(30_000)
    await asyncio.sleep(0)
    assert sum(t.done() for t in tasks) == 300
    assert all(t.done() == (o <= 30_000) for t, o in zip(tasks, offsets))
    gt.on_ack(29_000)  # an older ack changes nothing
    gt.on_ack(99_999)
    gt.on_ack(100_000)
    results = await asyncio.gather(*tasks)
    assert {r[0] for r in results} == {PutStatus.PUT_OK}
    assert gt.pending == 0 and gt.ok == 1000


async def test_no_connected_slave_answers_slave_not_available_at_once_with_a_remark():
    gt = make(connected=0)
    status, remark = await asyncio.wait_for(gt.wait(10), 0.1)
    assert status is PutStatus.SLAVE_NOT_AVAILABLE
    assert "no slave connected to broker-a's HA port 10912" in remark
    assert "stored on the master" in remark


async def test_a_slave_too_far_behind_answers_slave_not_available():
    gt = make(fallbehind=1000)
    gt.on_ack(500)
    status, remark = await gt.wait(1500)
    assert status is PutStatus.SLAVE_NOT_AVAILABLE and "1000 bytes behind" in remark
    assert gt.is_slave_ok(1499)


async def test_waiters_time_out_in_order_after_slave_timeout_with_one_timer():
    """Two waiters half a timeout apart: the first times out (not before slaveTimeout), the second is still
    waiting then and an ack in time answers it PUT_OK. Half a second of margin keeps a loaded machine honest."""
    gt = make(timeout_ms=1000)
    start = time.monotonic()
    first = asyncio.create_task(gt.wait(10))
    await asyncio.sleep(0.5)  # the scenario: the second put arrives half a timeout later
    second = asyncio.create_task(gt.wait(20))
    status, remark = await first
    assert status is PutStatus.FLUSH_SLAVE_TIMEOUT and "within slaveTimeout=1000 ms" in remark
    assert time.monotonic() - start >= 0.9  # it waited its slaveTimeout (how long beyond is a timing, not a fact)
    assert not second.done()
    gt.on_ack(20)
    assert (await second)[0] is PutStatus.PUT_OK


async def test_an_offset_already_acked_returns_put_ok_without_waiting():
    gt = make(connected=0)
    gt.on_ack(100)  # acked before the slave went away
    assert (await gt.wait(100))[0] is PutStatus.PUT_OK


async def test_close_answers_every_waiter():
    gt = make()
    tasks = [asyncio.create_task(gt.wait(o)) for o in (1, 2, 3)]
    await asyncio.sleep(0)
    gt.close()
    assert {(await t)[0] for t in tasks} == {PutStatus.FLUSH_SLAVE_TIMEOUT}


async def test_timed_out_entries_do_not_pile_up_behind_a_silent_slave():
    gt = make(timeout_ms=1)
    for batch in range(3):
        await asyncio.gather(*(gt.wait(10_000 + batch * 2000 + i) for i in range(1500)))
    assert gt.timeouts == 4500
    assert len(gt._heap) < 3000  # compacted instead of holding every timed-out future
    gt.on_ack(10**9)
    assert gt.pending == 0


async def test_a_senders_deadline_before_slave_timeout_answers_flush_slave_timeout_then():
    gt = make(timeout_ms=60_000)
    loop = asyncio.get_running_loop()
    early = asyncio.create_task(gt.wait(10, loop.time() + 0.05))  # the sender waits 50 ms, not a minute
    later = asyncio.create_task(gt.wait(20, loop.time() + 120))  # a deadline after slaveTimeout changes nothing
    status, remark = await asyncio.wait_for(early, 5)
    assert status is PutStatus.FLUSH_SLAVE_TIMEOUT and "before the sender's deadline" in remark
    assert not later.done() and gt.timeouts == 1
    gt.on_ack(20)
    assert (await later)[0] is PutStatus.PUT_OK and gt.pending == 0


async def test_entries_expired_by_senders_deadlines_do_not_pile_up_behind_a_silent_slave():
    gt = make(timeout_ms=60_000)
    loop = asyncio.get_running_loop()
    for batch in range(3):
        await asyncio.gather(*(gt.wait(10_000 + batch * 2000 + i, loop.time()) for i in range(1500)))
    assert gt.timeouts == 4500
    assert len(gt._heap) < 3000
