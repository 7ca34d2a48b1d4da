"""Truncation of a demoted master's log survives a crash at every step (apache/rocketmq #10666 does not).

The store holds epoch 1's messages, then epoch 2's, which the new master never got. A truncation to epoch 2's start
is requested; each case crashes the start that applies it after its k-th step (the failed start closes the files
as the kernel would after a kill), then starts again. Every case must end as a clean cut: the log is exactly the
old prefix, the consume queues index exactly it, the history is epoch 1 only, and the marker is gone.
"""

from __future__ import annotations

import shutil

import pytest

from broker.store import truncation
from broker.store.epoch_file import EpochEntry, EpochFile
from broker.store.message_store import MessageStore
from tests.unit.store.conftest import assert_queues_match_commitlog, commitlog_records, draft, small_config


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


async def build(root) -> tuple[int, int]:
    """A stopped store: epoch 1's messages, then epoch 2's from the returned cut point; (cut point, end)."""
    s = MessageStore(small_config(root))
    await s.start()
    s.epochs.append(1, 0)
    for i in range(40):  # more than one commitlog file of 64 KiB
        await s.put_messages("T", i % 3, [draft(f"e1-{i}".encode() * 200, TAGS="a")])
    cut = s.max_phy_offset
    s.epochs.append(2, cut)
    for i in range(30):
        await s.put_messages("T", i % 3, [draft(f"e2-{i}".encode() * 200, TAGS="b")])
    end = s.max_phy_offset
    await s.stop()
    return cut, end


def prefix_bytes(s: MessageStore, upto: int) -> bytes:
    out = bytearray()
    for mf in s.commitlog.files.files:
        n = max(0, min(upto, mf.end_offset) - mf.start_offset)
        out += bytes(mf.buffer[: min(n, mf.wrote_position)])
    return bytes(out)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    import asyncio

    root = tmp_path_factory.mktemp("built") / "store"
    cut, end = asyncio.run(build(root))
    return root, cut, end


def step_count() -> int:
    return 6


@pytest.mark.parametrize("crash_after", [None, *range(step_count())])
async def test_a_crash_at_any_step_recovers_to_the_cut(built, tmp_path, monkeypatch, crash_after):
    src, cut, end = built
    root = tmp_path / "store"
    shutil.copytree(src, root)
    reference = MessageStore(small_config(src))
    await reference.start()
    expected = prefix_bytes(reference, cut)
    await reference.stop()

    truncation.request(root, cut)
    if crash_after is not None:
        real = truncation.steps

        def crashing(*args):
            done = real(*args)
            assert len(done) == step_count(), "the test names every step; update step_count()"

            def die() -> None:
                raise Crash

            return [*done[: crash_after + 1], ("crash", die)]

        monkeypatch.setattr(truncation, "steps", crashing)
        with pytest.raises(Crash):
            await MessageStore(small_config(root)).start()
        monkeypatch.undo()

    s = MessageStore(small_config(root))
    await s.start()
    try:
        assert s.max_phy_offset == cut
        assert prefix_bytes(s, cut) == expected
        assert len(commitlog_records(s)) == 40  # epoch 1's messages, every one valid; none of epoch 2's
        assert_queues_match_commitlog(s)
        assert s.epochs.entries == [EpochEntry(1, 0)]
        assert truncation.pending(root) is None
        # The store goes on as a replica would: the new master's epoch 3 continues from the cut.
        s.epochs.append(3, cut)
        await s.put_messages("T", 0, [draft(b"from-the-new-master")])
        assert s.max_phy_offset > cut
    finally:
        await s.stop()
    again = EpochFile(root)
    again.load()
    assert again.entries == [EpochEntry(1, 0), EpochEntry(3, cut)]


async def test_a_target_inside_a_record_is_refused_and_changes_nothing(built, tmp_path):
    src, cut, end = built
    root = tmp_path / "store"
    shutil.copytree(src, root)
    truncation.request(root, cut + 7)
    with pytest.raises(truncation.TruncationError, match="not where a record starts"):
        await MessageStore(small_config(root)).start()
    truncation.marker_path(root).unlink()  # what the operator does after reading the error
    s = MessageStore(small_config(root))
    await s.start()
    try:
        assert s.max_phy_offset == end
        assert s.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, cut)]
    finally:
        await s.stop()


async def test_a_target_past_the_end_cuts_nothing_and_clears_the_marker(built, tmp_path):
    src, cut, end = built
    root = tmp_path / "store"
    shutil.copytree(src, root)
    truncation.request(root, end + 10_000)
    s = MessageStore(small_config(root))
    await s.start()
    try:
        assert s.max_phy_offset == end
        assert truncation.pending(root) is None
    finally:
        await s.stop()
