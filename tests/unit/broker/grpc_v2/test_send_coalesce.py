"""SendCoalescer (broker.grpc_v2.send_coalesce) on a real MessageStore: while a put waits in the store (here a
SYNC_FLUSH group commit), sends that arrive in one loop turn share one append with consecutive queue offsets,
each caller learning its own; while nothing waits (ASYNC_FLUSH) every send is appended at once; a batch whose
opener is cancelled still stores the others' messages."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.config import FlushDiskType, MessageStoreConfig
from broker.grpc_v2.send_coalesce import SendCoalescer
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft, PutStatus


async def started(root: Path, flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> MessageStore:
    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1024 * 1024,
                                            warm_mapped_file_enable=False, flush_disk_type=flush))
    await store.start()
    return store


def drafts(n: int) -> list[MessageDraft]:
    return [MessageDraft(body=f"m{i}".encode(), properties={"UNIQ_KEY": f"K{i}"}) for i in range(n)]


async def test_sends_of_one_turn_share_one_append_while_a_put_waits(tmp_path):
    store = await started(tmp_path)
    try:
        coalescer = SendCoalescer(store)
        answers = await asyncio.gather(*(coalescer.put("T", "T", 1, d) for d in drafts(10)))
        # the first put waits for its flush; the nine that arrive meanwhile are one append
        assert coalescer.appends == 2
        assert [index for _, index in answers] == [0, *range(9)]
        assert all(result.status is PutStatus.PUT_OK for result, _ in answers)
        assert [result.queue_offset + index for result, index in answers] == list(range(10))
        assert store.max_offset_in_queue("T", 1) == 10
        assert store.max_offset_in_queue("T", 0) == 0

        lone = await coalescer.put("T", "T", 1, MessageDraft(body=b"alone"))
        assert coalescer.appends == 3
        assert lone[0].queue_offset + lone[1] == 10
    finally:
        await store.stop()


async def test_without_a_waiting_put_every_send_is_appended_at_once(tmp_path):
    store = await started(tmp_path, FlushDiskType.ASYNC_FLUSH)
    try:
        await store.put_messages("T", 0, drafts(1))  # the first put creates the commitlog file (it waits for that)
        coalescer = SendCoalescer(store)
        answers = await asyncio.gather(*(coalescer.put("T", "T", 0, d) for d in drafts(5)))
        assert coalescer.appends == 5
        assert [r.queue_offset + i for r, i in answers] == list(range(1, 6))
    finally:
        await store.stop()


async def test_different_keys_are_appended_apart(tmp_path):
    store = await started(tmp_path)
    try:
        coalescer = SendCoalescer(store)
        answers = await asyncio.gather(*(coalescer.put(("F", q), "F", q, MessageDraft(body=b"x"))
                                         for q in (0, 1, 0, 1, 0, 1)))
        assert coalescer.appends == 3  # the first alone, then one batch per queue
        assert [r.queue_offset + i for r, i in answers] == [0, 0, 1, 1, 2, 2]
    finally:
        await store.stop()


async def test_a_cancelled_opener_leaves_the_others_stored(tmp_path):
    store = await started(tmp_path)
    try:
        coalescer = SendCoalescer(store)
        first = asyncio.ensure_future(coalescer.put("T", "T", 0, MessageDraft(body=b"first")))
        opener = asyncio.ensure_future(coalescer.put("T", "T", 0, MessageDraft(body=b"gone")))
        follower = asyncio.ensure_future(coalescer.put("T", "T", 0, MessageDraft(body=b"kept")))
        await asyncio.sleep(0)  # first waits for its flush, the opener opened a batch and yields, the follower joined
        opener.cancel()  # while the opener waits for its turn to end
        result, index = await asyncio.wait_for(follower, 5)
        await asyncio.wait_for(first, 5)
        assert opener.cancelled()
        assert result.status is PutStatus.PUT_OK and index == 0
        assert coalescer.appends == 2
        assert store.max_offset_in_queue("T", 0) == 2
        stored = b"".join(bytes(b) for b in store.get_message("g", "T", 0, 0, 10).buffers)
        assert b"kept" in stored and b"first" in stored and b"gone" not in stored
    finally:
        await store.stop()
