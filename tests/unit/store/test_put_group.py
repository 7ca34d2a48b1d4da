"""``MessageStore.put_grouped``: single-message puts of one event-loop pass share one append per queue and one
replica wait (issue 26), and each still gets its own physical offset, queue offset and status; a caller that gave
up on its future costs the others nothing; a queue holds its puts in the order they were submitted, across groups."""

from __future__ import annotations

import asyncio

import logging

from broker.store.put_group import PutGroup
from harness.waiting import async_wait_until
from broker.store.put_prepare import E_QUEUE, E_TOPIC, prepare_batch
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


async def test_a_cancelled_waiter_leaves_the_group_answered_and_stores_its_message(store, caplog):
    release = asyncio.Event()

    async def waiter(next_offset):
        await release.wait()
        return PutStatus.PUT_OK, ""

    store.set_replica_waiter(waiter)
    futs = [store.put_grouped("T", 0, draft(f"m{i}".encode()), wait=True) for i in range(3)]
    gave_up = asyncio.ensure_future(futs[1])  # the gRPC handler awaiting it, cancelled when its client gives up
    await asyncio.sleep(0)
    gave_up.cancel()
    with caplog.at_level(logging.ERROR, logger="broker.store"):
        release.set()
        kept = await asyncio.wait_for(asyncio.gather(futs[0], futs[2]), 5)
    assert futs[1].cancelled()
    assert [r.queue_offset for r in kept] == [0, 2] and all(r.status is PutStatus.PUT_OK for r in kept)
    assert store.max_offset_in_queue("T", 0) == 3  # the cancelled caller's message is stored all the same
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_a_group_whose_append_yields_keeps_the_next_groups_behind_it():
    """Group 1 appends queue A (which yields, as the store's put lock or a file roll makes it), then queue B; group
    2, flushed meanwhile, appends B only after group 1 did: B holds its puts in the order they were submitted."""
    appended: list[tuple[int, bytes]] = []
    offsets = {}
    slow = asyncio.Event()

    async def append(prepared):
        first = prepared.entries[0]
        queue = first[E_TOPIC], first[E_QUEUE]
        if queue == ("A", 0) and not slow.is_set():
            slow.set()
            for _ in range(5):
                await asyncio.sleep(0)
        base = offsets.get(queue, 0)
        offsets[queue] = base + len(prepared.entries)
        appended.append((queue[0], base))
        return PutResult(PutStatus.PUT_OK, wrote_offset=0, wrote_bytes=1, queue_offset=base,
                         msg_count=len(prepared.entries), physical_offsets=[0] * len(prepared.entries))

    async def wait_stored(result, deadline):
        return None

    group = PutGroup(append, wait_stored, replicated=lambda: False)
    answers: dict[str, PutResult] = {}

    def submit(topic: str, name: str) -> None:
        prepared = prepare_batch(topic, 0, (draft(name.encode()),), max_message_size=4096, file_size=1 << 20,
                                 max_delay_level=18)
        group.submit(prepared, None, lambda r: answers.__setitem__(name, r))

    submit("A", "a1")
    submit("B", "b1")
    await slow.wait()  # group 1 is inside its append of A
    submit("B", "b2")  # group 2
    await async_wait_until(lambda: len(answers) == 3, 5, lambda: f"three answers, got {sorted(answers)}", 0.001)
    assert appended == [("A", 0), ("B", 0), ("B", 1)]
    assert answers["b1"].queue_offset == 0 and answers["b2"].queue_offset == 1
