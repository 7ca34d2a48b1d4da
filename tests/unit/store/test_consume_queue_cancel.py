"""A put cancelled while its consume queue's ``prepare`` was creating a file (the client's connection closed, which
cancels the requests it had in flight) must not leave the queue unwritable: the file the executor created is the
queue's next file, not an orphan that the next ``prepare`` collides with (FileExistsError, every later put failing)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker.store.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue
from harness.waiting import async_wait_until

FILE = 10 * UNIT_SIZE


def units(first_phy: int, count: int) -> bytes:
    return b"".join(UNIT.pack(first_phy + 100 * i, 100, 0) for i in range(count))


@pytest.fixture
def executor():
    with ThreadPoolExecutor(1) as ex:
        yield ex


async def test_a_prepare_cancelled_after_the_file_was_created_leaves_the_queue_writable(tmp_path, executor):
    loop = asyncio.get_running_loop()
    created, release = threading.Event(), threading.Event()

    async def run(fn):
        def job():
            result = fn()
            created.set()  # the file is on disk ...
            release.wait(10)  # ... and its handle reaches the loop only once the put was cancelled
            return result
        return await loop.run_in_executor(executor, job)

    cq = ConsumeQueue("T", 0, tmp_path / "consumequeue", FILE)
    task = asyncio.ensure_future(cq.prepare(0, 3, run))
    await async_wait_until(created.is_set, 10, "the executor creating file 0", 0.005)
    assert (cq.directory / f"{0:020d}").exists()
    task.cancel()  # what a closed connection does to the put that was waiting here
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()

    # the next put of the same units prepares and writes as if nothing happened, and later ones roll over
    await cq.write_units(0, units(0, 3), 300, run)
    await cq.write_units(3, units(300, 12), 1500, run)
    assert cq.max_offset == 15
    assert sorted(p.name for p in cq.directory.iterdir()) == [f"{0:020d}", f"{FILE:020d}"]
    assert bytes(cq.read_units(0, 10)) == units(0, 10)
    assert bytes(cq.read_units(10, 10)) == units(1000, 5)
    cq.close()


async def test_a_prepare_cancelled_before_its_file_was_created_creates_nothing_extra(tmp_path, executor):
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    executor.submit(gate.wait, 10)  # the single disk thread is busy: the creation waits in the queue

    async def run(fn):
        return await loop.run_in_executor(executor, fn)

    cq = ConsumeQueue("T", 1, tmp_path / "consumequeue", FILE)
    task = asyncio.ensure_future(cq.prepare(0, 3, run))
    await asyncio.sleep(0)
    task.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await cq.write_units(0, units(0, 3), 300, run)
    assert cq.max_offset == 3 and bytes(cq.read_units(0, 3)) == units(0, 3)
    assert [p.name for p in cq.directory.iterdir()] == [f"{0:020d}"]
    cq.close()
