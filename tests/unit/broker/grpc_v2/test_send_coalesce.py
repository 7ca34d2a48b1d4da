"""SendCoalescer (broker.grpc_v2.send_coalesce) on a real MessageStore: sends that arrive in one loop turn share
one append with consecutive queue offsets, each caller learning its own; a lone send is appended alone; a batch
whose opener is cancelled still stores the others' messages."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.config import MessageStoreConfig
from broker.grpc_v2.send_coalesce import SendCoalescer
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft, PutStatus


async def started(root: Path) -> MessageStore:
    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1024 * 1024,
                                            warm_mapped_file_enable=False))
    await store.start()
    return store


async def test_sends_of_one_turn_share_one_append_with_their_own_offsets(tmp_path):
    store = await started(tmp_path)
    try:
        coalescer = SendCoalescer(store)
        drafts = [MessageDraft(body=f"m{i}".encode(), properties={"UNIQ_KEY": f"K{i}"}) for i in range(10)]
        answers = await asyncio.gather(*(coalescer.put("T", "T", 1, d) for d in drafts))
        assert coalescer.appends == 1
        assert [index for _, index in answers] == list(range(10))
        assert all(result.status is PutStatus.PUT_OK for result, _ in answers)
        assert [result.queue_offset + index for result, index in answers] == list(range(10))
        assert store.max_offset_in_queue("T", 1) == 10
        assert store.max_offset_in_queue("T", 0) == 0

        lone = await coalescer.put("T", "T", 1, MessageDraft(body=b"alone"))
        assert coalescer.appends == 2
        assert lone[0].queue_offset + lone[1] == 10
    finally:
        await store.stop()


async def test_different_keys_are_appended_apart(tmp_path):
    store = await started(tmp_path)
    try:
        coalescer = SendCoalescer(store)
        answers = await asyncio.gather(*(coalescer.put(("F", q), "F", q, MessageDraft(body=b"x"))
                                         for q in (0, 1, 0, 1)))
        assert coalescer.appends == 2
        assert [r.queue_offset + i for r, i in answers] == [0, 0, 1, 1]
    finally:
        await store.stop()


async def test_a_cancelled_opener_leaves_the_others_stored(tmp_path):
    store = await started(tmp_path)
    try:
        coalescer = SendCoalescer(store)
        opener = asyncio.ensure_future(coalescer.put("T", "T", 0, MessageDraft(body=b"gone")))
        follower = asyncio.ensure_future(coalescer.put("T", "T", 0, MessageDraft(body=b"kept")))
        await asyncio.sleep(0)  # the opener opened its batch and yields its turn, the follower joined it
        opener.cancel()  # while the opener waits for its turn to end
        result, index = await asyncio.wait_for(follower, 5)
        assert opener.cancelled()
        assert result.status is PutStatus.PUT_OK and index == 0
        assert coalescer.appends == 1
        assert store.max_offset_in_queue("T", 0) == 1
        got = store.get_message("g", "T", 0, 0, 10)
        assert b"kept" in b"".join(bytes(b) for b in got.buffers) and b"gone" not in b"".join(
            bytes(b) for b in got.buffers)
    finally:
        await store.stop()
