"""The optimised read path returns exactly what a naive per-record read returns (``harness.store_reference``: one
``commitlog.read`` per unit, the batch caps checked by a helper, as the store's first version did): random batches
over several queues and commitlog files, random offsets, caps, tag filters, in-memory or in-disk limits, and
records made unreadable."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.store import get as get_path
from broker.store.message_store import MessageStore
from broker.store.types import GetResult
from harness.store_reference import naive_get
from remoting.message_codec import TagFilter

from .conftest import draft, small_config

TOPIC = "EqTopic"
TAGS = ["a", "b", "c", None, "", "é"]


def _facts(res: GetResult) -> tuple:
    """Everything a reader sees: the records one by one (runs of touching records are split back)."""
    return (res.status, res.next_begin_offset, res.min_offset, res.max_offset, res.records,
            res.suggest_pulling_from_slave, res.total_bytes, res.message_count)


batches = st.lists(
    st.tuples(
        st.integers(0, 2),  # queue
        st.lists(st.tuples(st.integers(1, 3000), st.sampled_from(TAGS)), min_size=1, max_size=16),
    ),
    min_size=3,
    max_size=25,
)
queries = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 1, 1, 2, 2, 3]),  # queue (3 never written)
        st.floats(-0.05, 1.05),  # offset, as a fraction of the queue's length
        st.sampled_from([1, 2, 7, 8, 9, 31, 32, 33, 64]),  # max_msg_nums
        st.sampled_from([0, 0, 1, 2000, 9000, 40000]),  # max_total_bytes
        st.sampled_from([None, "*", "a", "b || c", "a||b||c", "zz", "é"]),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches, queries=queries, ratio=st.sampled_from([0, 40]), damage=st.integers(-1, 3))
@example(  # the in-memory count cap (32) and, in the damaged first file, MESSAGE_WAS_REMOVING
    batches=[(0, [(100, "a")] * 16)] * 3
    + [(1, [(3000, None)] * 7), (2, [(3000, "b")] * 5)]
    + [(1, [(3000, None)] * 16)] * 3,
    queries=[(0, 0.0, 64, 0, None), (0, 0.0, 64, 0, "a"), (1, 0.3, 2, 0, None), (2, 0.0, 64, 0, "b")],
    ratio=40,
    damage=0,
)
def test_optimised_get_equals_naive_per_record_read(batches, queries, ratio, damage):
    root = Path(tempfile.mkdtemp(prefix="geteq-"))
    try:
        asyncio.run(_check(root, batches, queries, ratio, damage))
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _check(root: Path, batches, queries, ratio: int, damage: int) -> None:
    store = MessageStore(
        small_config(root / "store", access_message_in_memory_max_ratio=ratio, mapped_file_size_consume_queue=20 * 4096)
    )
    await store.start()
    try:
        for queue_id, msgs in batches:
            drafts = [
                draft(
                    b"x" * size, **({"TAGS": tag} if tag is not None else {}), **({"MYTAGS": "a"} if size % 3 else {})
                )
                for size, tag in msgs
            ]
            res = await store.put_messages(TOPIC, queue_id, drafts)
            assert res.status.name == "PUT_OK", res
        files = store.commitlog.files.files
        saved = [mf.wrote_position for mf in files]
        if 0 <= damage < len(files) - 1:  # records of a non-last file become unreadable (MESSAGE_WAS_REMOVING)
            files[damage].wrote_position //= 2
        for queue_id, where, nums, cap, expr in queries:
            length = store.max_offset_in_queue(TOPIC, queue_id)
            offset = round(where * length)
            filt = None if expr is None else TagFilter(expr)
            got = get_path.get_message(
                store.config, store.commitlog, store.consume_queues, TOPIC, queue_id, offset, nums, cap, filt
            )
            want = naive_get(store, TOPIC, queue_id, offset, nums, cap, filt)
            assert _facts(got) == _facts(want), (queue_id, offset, nums, cap, expr)
            assert all(type(b) is memoryview for b in got.buffers)  # zero-copy views of the mapping
            assert sum(map(len, got.buffers)) == got.total_bytes
        for mf, wrote in zip(files, saved):
            mf.wrote_position = wrote
    finally:
        await store.stop()


@given(st.integers(-120, 60), st.integers(0, 255), st.integers(-40, 300), st.binary(max_size=300), st.integers(0, 400))
def test_in_place_tags_reader_equals_the_slicing_one(body_len, topic_len, props_len, tail, cut):
    """Corrupt lengths and truncated records alike: the same TAGS or the same exception type."""
    head = bytes(84) + body_len.to_bytes(4, "big", signed=True) + b"b" * max(body_len, 0)
    raw = head + bytes([topic_len]) + b"t" * topic_len + props_len.to_bytes(2, "big", signed=True) + tail
    raw = raw[:cut]

    def run(fn):
        try:
            return fn(raw)
        except Exception as exc:  # noqa: BLE001 - the comparison is the point
            return type(exc)

    assert run(get_path._record_tags) == run(get_path._record_tags_sliced)


@given(
    st.dictionaries(
        st.sampled_from(["TAGS", "MYTAGS", "KEYS", "TAGSX", "T"]),
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02"), max_size=8),
        max_size=4,
    ),
    st.integers(1, 50),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=3),  # no lone surrogates: not encodable
)
def test_in_place_tags_reader_on_records(props, body_len, topic):
    text = "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()
    tb = topic.encode()[:255]
    raw = bytes(84) + body_len.to_bytes(4, "big") + b"b" * body_len + bytes([len(tb)]) + tb
    raw += len(text).to_bytes(2, "big") + text
    assert get_path._record_tags(raw) == get_path._record_tags_sliced(raw) == props.get("TAGS")
