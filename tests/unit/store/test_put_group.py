"""``MessageStore.put_grouped``: single-message puts of one event-loop pass share one append per queue and one
replica wait (issue 26), and each still gets its own physical offset, queue offset and status."""

from __future__ import annotations

import asyncio

from broker.store.types import PutResult, PutStatus
from tests.unit.store.conftest import assert_queues_match_commitlog, commitlog_records, draft, replica_waiter


async def test_one_pass_of_puts_is_one_replica_wait_with_per_message_offsets(store):
    calls = replica_waiter(store)
    futs = [store.put_grouped("T", i % 3, draft(f"m{i}".encode(), UNIQ_KEY=f"k{i}"), wait=True) for i in range(12)]
    results = await asyncio.gather(*futs)
    assert calls == [store.max_phy_offset]  # one wait, for the end of everything appended
    assert all(r.status is PutStatus.PUT_OK and r.msg_count == 1 for r in results)
    for q in range(3):
        assert [r.queue_offset for r in results[q::3]] == [0, 1, 2, 3]
    assert len(commitlog_records(store)) == 12
    for i, r in enumerate(results):
        rec = store.read_message(r.physical_offsets[0])
        assert rec.body == f"m{i}".encode() and rec.queue_offset == r.queue_offset and rec.queue_id == i % 3
        assert r.next_offset == r.physical_offsets[0] + rec.store_size
    assert_queues_match_commitlog(store)
    # a later pass is a group of its own
    await asyncio.gather(store.put_grouped("T", 0, draft(), wait=True))
    assert len(calls) == 2


async def test_a_group_status_reaches_every_member_and_wait_false_does_not_wait(store):
    release = asyncio.Event()
    replica_waiter(store, PutStatus.FLUSH_SLAVE_TIMEOUT, "slave slow", release=release)
    waiting = [store.put_grouped("T", 0, draft(), wait=True) for _ in range(3)]
    quick = store.put_grouped("T", 0, draft(), wait=False)
    assert (await quick).status is PutStatus.PUT_OK
    assert not any(f.done() for f in waiting)
    release.set()
    assert [r.status for r in await asyncio.gather(*waiting)] == [PutStatus.FLUSH_SLAVE_TIMEOUT] * 3


async def test_a_member_with_an_earlier_deadline_is_answered_at_its_deadline(store):
    release = asyncio.Event()
    replica_waiter(store, release=release)
    loop = asyncio.get_running_loop()
    patient = store.put_grouped("T", 0, draft(), wait=True)  # no deadline: waits as configured
    hurried = store.put_grouped("T", 0, draft(), wait=True, deadline=loop.time() + 0.05)
    result = await asyncio.wait_for(hurried, 5)
    assert result.status is PutStatus.FLUSH_SLAVE_TIMEOUT and "deadline" in result.remark
    assert not patient.done()
    release.set()
    assert (await patient).status is PutStatus.PUT_OK


async def test_refusals_come_back_at_once(store):
    bad = store.put_grouped("T", -1, draft(), wait=True)
    assert isinstance(bad, PutResult) and bad.status is PutStatus.MESSAGE_ILLEGAL
    await store.stop()
    stopped = store.put_grouped("T", 0, draft(), wait=True)
    assert isinstance(stopped, PutResult) and stopped.status is PutStatus.SERVICE_NOT_AVAILABLE


async def test_puts_submitted_before_stop_are_answered_not_lost(store):
    fut = store.put_grouped("T", 0, draft(), wait=True)
    await store.stop()
    result = await asyncio.wait_for(fut, 5)
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE  # stopped before its group was appended: not stored
