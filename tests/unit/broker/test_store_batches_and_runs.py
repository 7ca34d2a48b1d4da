"""The store paths the remoting data path relies on (issue 16 item 4):

- ``put_batch`` (a SEND_BATCH_MESSAGE batch as decoded, no draft per message) stores exactly what the draft path
  stores for the same messages: same records (properties = the message's own, then the batch's), same
  consume-queue units (tags codes), across commitlog file ends;
- a read returns the records as zero-copy views of the mapping, one per contiguous run, and those views stay
  readable after their file is deleted or the store stops (a pull answer may still be on its way out).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import MessageStoreConfig
from broker.store.message_store import MessageStore
from broker.store.types import GetStatus, MessageDraft, PutStatus, RawBatch
from remoting.message_codec import decode_batch, encode_batch, encode_properties, iter_records

BORN = ("10.0.0.7", 50123)
BORN_TS = 1_700_000_000_000


def config(root: Path, file_size: int = 64 * 1024) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=file_size,
        mapped_file_size_consume_queue=20 * 256,
        warm_mapped_file_enable=False,
        flush_interval_commit_log=50,
        flush_interval_consume_queue=50,
        clean_resource_interval=100_000,
    )


def run(coro_fn, file_size: int = 64 * 1024):
    root = Path(tempfile.mkdtemp(prefix="rawbatch-"))
    try:
        return asyncio.run(coro_fn(root, file_size))
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def started(root: Path, file_size: int) -> MessageStore:
    store = MessageStore(config(root, file_size))
    await store.start()
    return store


def units(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    cq = store.consume_queues.find(topic, queue_id)
    return [cq.unit(i) for i in range(cq.min_offset, cq.max_offset)]


_value = st.text(st.sampled_from("abcé T|"), min_size=1, max_size=6)
_props = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "MYTAGS", "x"]), _value, max_size=4)
_messages = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(min_size=1, max_size=3000), _props),
                     min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(_messages, min_size=1, max_size=4), cluster=st.sampled_from(["C", "DefaultCluster"]))
def test_a_raw_batch_is_stored_exactly_as_the_same_messages_through_drafts(batches, cluster):
    suffix = encode_properties({"CLUSTER": cluster})

    async def check(root: Path, file_size: int) -> None:
        raw_store = await started(root / "raw", file_size)
        draft_store = await started(root / "drafts", file_size)
        try:
            for messages in batches:
                entries = decode_batch(encode_batch(messages), 1000, 4 << 20)
                raw = await raw_store.put_batch("T", 0, RawBatch(entries, suffix, 0, BORN_TS, BORN, 0, wait=True))
                drafts = [
                    MessageDraft(body, {**props, "CLUSTER": cluster}, flag, BORN_TS, BORN) for flag, body, props in
                    messages
                ]
                ref = await draft_store.put_messages("T", 0, drafts)
                assert raw.status is ref.status is PutStatus.PUT_OK
                assert (raw.physical_offsets, raw.queue_offset) == (ref.physical_offsets, ref.queue_offset)
            got = raw_store.get_message("g", "T", 0, 0, 1024, max_total_bytes=1 << 30)
            want = draft_store.get_message("g", "T", 0, 0, 1024, max_total_bytes=1 << 30)
            strip = [(m.body, m.properties, m.flag, m.queue_offset, m.physical_offset, m.born_host) for m in
                     iter_records(b"".join(got.buffers), check_crc=True)]
            assert strip == [(m.body, m.properties, m.flag, m.queue_offset, m.physical_offset, m.born_host) for m in
                             iter_records(b"".join(want.buffers), check_crc=True)]
            assert units(raw_store, "T", 0) == units(draft_store, "T", 0)
        finally:
            await raw_store.stop()
            await draft_store.stop()

    run(check, file_size=16 * 1024)


def test_a_raw_batch_refuses_a_per_message_delay_and_over_long_properties_before_writing():
    async def check(root: Path, file_size: int) -> None:
        store = await started(root, file_size)
        try:
            delayed = RawBatch([(0, b"x", b"DELAY\x012")], b"CLUSTER\x01c\x02")
            res = await store.put_batch("T", 0, delayed)
            assert res.status is PutStatus.MESSAGE_ILLEGAL and "DELAY" in res.remark
            long_props = RawBatch([(0, b"x", b"k\x01" + b"v" * 32760)], b"CLUSTER\x01c\x02")
            res = await store.put_batch("T", 0, long_props)
            assert res.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
            assert store.max_phy_offset == 0
        finally:
            await store.stop()

    run(check)


def test_a_single_queue_read_is_one_view_and_interleaved_queues_give_one_view_per_run():
    async def check(root: Path, file_size: int) -> None:
        store = await started(root, file_size)
        try:
            for _ in range(3):
                await store.put_messages("Solo", 0, [MessageDraft(b"s%d" % i) for i in range(10)])
            for i in range(6):  # A, B, A, B, ...: every A record is its own run
                await store.put_messages("Mixed", i % 2, [MessageDraft(b"m%d" % i)])
            solo = store.get_message("g", "Solo", 0, 0, 64)
            assert (solo.status, solo.message_count, len(solo.buffers)) == (GetStatus.FOUND, 30, 1)
            assert all(type(b) is memoryview for b in solo.buffers)
            mixed = store.get_message("g", "Mixed", 0, 0, 64)
            assert (mixed.message_count, len(mixed.buffers)) == (3, 3)
            assert [m.body for m in iter_records(b"".join(mixed.buffers))] == [b"m0", b"m2", b"m4"]
        finally:
            await store.stop()

    run(check)


def test_views_of_a_pull_stay_readable_after_their_file_is_deleted_and_the_store_stops():
    async def check(root: Path, file_size: int) -> None:
        store = await started(root, file_size)
        body = b"x" * 3000
        for _ in range(8):  # several 16 KiB commitlog files
            await store.put_messages("T", 0, [MessageDraft(body) for _ in range(4)])
        got = store.get_message("g", "T", 0, 0, 4)
        before = b"".join(got.buffers)
        files = store.commitlog.files
        assert len(files.files) > 2
        files.delete_first()  # what cleanup does to an expired file
        await store.stop()  # closes every mapping
        assert b"".join(got.buffers) == before
        assert [m.body for m in iter_records(before, check_crc=True)] == [body] * 4

    run(check, file_size=16 * 1024)
