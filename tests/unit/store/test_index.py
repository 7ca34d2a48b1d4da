"""The message index: RocketMQ's file layout, lookups against a model, and the service over a real store."""

from __future__ import annotations

import dataclasses
import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.index_file import ENTRY_SIZE, HEADER, HEADER_SIZE, IndexFile, key_hash
from broker.store.dispatch_scan import scan
from broker.store.index_service import IndexService
from harness import small_disk
from harness.waiting import async_wait_until
from tests.unit.store.conftest import draft, replace

T0 = 1_700_000_000_000


def test_key_hash_is_javas_abs_hash_code():
    assert key_hash("") == 0
    assert key_hash("hello") == 99162322  # Java: "hello".hashCode()
    assert key_hash("Aa") == key_hash("BB") == 2112  # a classic Java collision
    assert key_hash("polygenelubricants") == 0  # Java: "polygenelubricants".hashCode() == Integer.MIN_VALUE


def test_layout_is_rocketmqs(tmp_path):
    f = IndexFile(tmp_path / "x", slots=7, entries=10, create=True)
    assert os.path.getsize(f.path) == HEADER_SIZE + 7 * 4 + 10 * 20
    assert f.put("T#a", 1000, T0 + 2500)
    assert f.put("T#b", 2000, T0 + 4000)
    f.flush()
    raw = f.path.read_bytes()
    begin_ts, end_ts, begin_phy, end_phy, slot_count, count = HEADER.unpack_from(raw, 0)
    assert (begin_ts, end_ts, begin_phy, end_phy, count) == (T0 + 2500, T0 + 4000, 1000, 2000, 3)
    entry2 = raw[HEADER_SIZE + 7 * 4 + 2 * ENTRY_SIZE: HEADER_SIZE + 7 * 4 + 3 * ENTRY_SIZE]
    assert int.from_bytes(entry2[4:12], "big") == 2000 and int.from_bytes(entry2[12:16], "big") == 1
    f.close()


@settings(max_examples=60)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(0, 100_000)), max_size=60),
       st.integers(1, 5))
def test_lookups_match_a_model_even_with_collisions(tmp_path_factory, puts, slots):
    path = tmp_path_factory.mktemp("idx") / "f"
    f = IndexFile(path, slots=slots, entries=40, create=True)
    model: dict[str, list[int]] = {}
    stored = 0
    for i, (key, ts_ms) in enumerate(puts):
        ok = f.put(f"T#{key}", i * 100, T0 + i * 1000)
        assert ok is (stored < 39)
        if ok:
            stored += 1
            model.setdefault(key, []).append(i * 100)
    for key in "abcde":
        want = list(reversed(model.get(key, [])))
        got = f.lookup(f"T#{key}", 1000, 0, 2**62)
        # a collision may add another key's offsets (the caller checks records); it never loses one
        assert [o for o in got if o in want] == want
        assert f.lookup(f"T#{key}", 2, 0, 2**62) == got[:2]
    f.close()
    again = IndexFile(path, slots=slots, entries=40, create=False)
    assert again.consistent()
    for key in "abcde":
        assert [o for o in again.lookup(f"T#{key}", 1000, 0, 2**62) if o in model.get(key, [])] == \
            list(reversed(model.get(key, [])))
    again.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]), st.integers(0, 5_000)), max_size=60),
       st.integers(1, 7), st.lists(st.integers(1, 9), min_size=1, max_size=10))
def test_a_batch_put_writes_the_same_bytes_as_one_put_per_key(tmp_path_factory, puts, slots, chunks):
    """``put_many`` (the index service's path: batches in any chunking, slots repeated inside a batch, a full file)
    against ``put`` key by key: the same file, byte for byte."""
    root = tmp_path_factory.mktemp("idx")
    one = IndexFile(root / "one", slots=slots, entries=40, create=True)
    many = IndexFile(root / "many", slots=slots, entries=40, create=True)
    stamps = [T0 + sum(ms for _, ms in puts[: i + 1]) for i in range(len(puts))]
    for i, (key, _) in enumerate(puts):
        one.put(f"T#{key}", i * 100, stamps[i])
    at, c = 0, 0
    while at < len(puts):
        n = chunks[c % len(chunks)]
        c += 1
        part = range(at, min(at + n, len(puts)))
        done = many.put_many([key_hash(f"T#{puts[i][0]}") for i in part], [i * 100 for i in part],
                             [stamps[i] for i in part])
        assert done == min(len(part), 39 - at) if at < 39 else done == 0
        at += len(part)
    one.close()
    many.close()
    assert (root / "one").read_bytes() == (root / "many").read_bytes()


def test_time_range_is_second_granular_and_never_misses(tmp_path):
    f = IndexFile(tmp_path / "f", slots=11, entries=10, create=True)
    f.put("T#k", 1, T0)
    f.put("T#k", 2, T0 + 5_400)  # kept as 5 s after the begin: reads as T0 + 5000
    assert f.lookup("T#k", 10, T0 + 5_300, T0 + 5_500) == [2]  # RocketMQ would miss it (5000 < 5300)
    assert f.lookup("T#k", 10, T0 + 6_000, T0 + 9_000) == []
    assert f.lookup("T#k", 10, T0, T0 + 999) == [1]
    f.close()


def test_sparse_file_costs_only_what_it_holds(tmp_path):
    f = IndexFile(tmp_path / "f", slots=5_000_000, entries=20_000_000, create=True)
    for i in range(1000):
        f.put(f"T#{i}", i, T0)
    f.flush()
    st_ = os.stat(f.path)
    assert st_.st_size == 420_000_040
    assert st_.st_blocks * 512 < 8 << 20  # 1000 keys: about 1000 slot pages and 5 entry pages, not 420 MB
    f.close()


def test_a_torn_header_is_detected(tmp_path):
    f = IndexFile(tmp_path / "f", slots=11, entries=10, create=True)
    f.put("T#a", 100, T0)
    f.put("T#b", 200, T0)
    f.close()
    raw = bytearray((tmp_path / "f").read_bytes())
    HEADER.pack_into(raw, 0, T0, T0, 100, 200, 2, 4)  # says 3 entries; the third was never written
    (tmp_path / "f").write_bytes(raw)
    assert not IndexFile(tmp_path / "f", slots=11, entries=10, create=False).consistent()


def entries(svc: IndexService) -> int:
    return sum(f.count - 1 for f in svc.files)


@pytest.fixture
async def plain_store(open_store, config):
    """A store without its own index service: these tests drive one by hand."""
    return await open_store(replace(config, message_index_enable=False))


async def test_service_indexes_keys_and_ids_resumes_and_rebuilds(plain_store):
    store = plain_store
    ids = []
    for i in range(30):
        d = draft(f"m{i}".encode(), KEYS=f"order-{i % 10} shared", UNIQ_KEY=f"{i:032X}")
        ids.append(f"{i:032X}")
        await store.put_messages("Orders", i % 2, [d])
    await store.put_messages("Other", 0, [draft(b"x", KEYS="order-1")])
    await store.put_messages("Orders", 0, [dataclasses.replace(draft(b"rolled back", KEYS="order-1"), sys_flag=12)])
    svc = IndexService(store.root, store.commitlog, slots=101, entries=25)
    svc.load()
    assert svc.files == []  # nothing indexed yet, no file
    while svc.build(1 << 20):
        pass
    assert svc.position == store.max_phy_offset
    assert entries(svc) == 30 * 3 + 1  # UNIQ_KEY, order-N and shared per Orders message; Other's one key
    assert len(svc.files) >= 3  # 32 records x 3 keys over files of 24 entries
    hits = svc.lookup("Orders", "order-1", 64, 0, 2**62)
    assert len(hits) == 3  # order-1 in Orders: messages 1, 11, 21; not Other's, not the rolled-back one
    assert len(svc.lookup("Orders", "shared", 64, 0, 2**62)) == 30
    assert len(svc.lookup("Orders", ids[7], 64, 0, 2**62)) == 1
    assert svc.lookup("Orders", "shared", 5, 0, 2**62) == svc.lookup("Orders", "shared", 64, 0, 2**62)[:5]
    svc.close()

    again = IndexService(store.root, store.commitlog, slots=101, entries=25)
    again.load()
    await store.put_messages("Orders", 0, [draft(b"new", KEYS="order-1")])
    while again.build(1 << 20):
        pass
    assert len(again.lookup("Orders", "order-1", 64, 0, 2**62)) == 4
    assert entries(again) == 30 * 3 + 2  # the new one, nothing indexed twice
    assert len(again.lookup("Orders", "shared", 64, 0, 2**62)) == 30
    newest = again.files[-1]
    again.close()
    raw = bytearray(newest.path.read_bytes())
    b, e, bp, ep, sc, count = HEADER.unpack_from(raw, 0)
    HEADER.pack_into(raw, 0, b, e, bp, ep + 1, sc, count)  # a torn header: the newest file is rebuilt
    newest.path.write_bytes(raw)
    third = IndexService(store.root, store.commitlog, slots=101, entries=25)
    third.load()
    while third.build(1 << 20):
        pass
    assert len(third.lookup("Orders", "order-1", 64, 0, 2**62)) == 4
    assert len(third.lookup("Orders", "shared", 64, 0, 2**62)) == 30
    assert entries(third) == 30 * 3 + 2
    third.close()


@pytest.mark.parametrize("n", [0, 1])
async def test_delete_below_keeps_the_newest(plain_store, n):
    store = plain_store
    for i in range(40):
        await store.put_messages("T", 0, [draft(b"x", KEYS=f"k{i}")])
    svc = IndexService(store.root, store.commitlog, slots=11, entries=10)
    svc.load()
    while svc.build(1 << 20):
        pass
    files = len(svc.files)
    assert files >= 4
    assert svc.delete_below(svc.files[n].end_phy + 1) == n + 1
    assert len(svc.files) == files - n - 1
    left = len(svc.files)
    assert svc.delete_below(2**62) == left - 1 and len(svc.files) == 1
    svc.close()


async def test_the_store_indexes_as_it_appends_and_after_a_restart(open_store, config):
    store = await open_store(config)
    for i in range(20):
        await store.put_messages("Orders", 0, [draft(b"m", KEYS=f"k{i % 4}", UNIQ_KEY=f"{i:032X}")])
    await async_wait_until(lambda: store.index.position == store.max_phy_offset, 10, "the index to reach the commitlog end")
    assert len(store.index_candidates("Orders", "k1", 64, 0, 2**62)) == 5
    assert len(store.index_candidates("Orders", f"{7:032X}", 64, 0, 2**62)) == 1
    await store.stop()
    again = await open_store(config)
    await again.put_messages("Orders", 0, [draft(b"m", KEYS="k1")])
    await async_wait_until(lambda: again.index.position == again.max_phy_offset, 10, "the index to reach the commitlog end")
    assert len(again.index_candidates("Orders", "k1", 64, 0, 2**62)) == 6
    assert entries(again.index) == 20 * 2 + 1
    off = await open_store(replace(config, store_path_root_dir=str(config.root_dir.parent / "off"),
                                   message_index_enable=False))
    await off.put_messages("Orders", 0, [draft(b"m", KEYS="k1")])
    assert off.index_candidates("Orders", "k1", 64, 0, 2**62) == []
    assert not (off.root / "index").exists()


def test_a_full_disk_is_an_error_not_a_sigbus(tmp_path):
    reason = small_disk.unavailable()
    if reason:
        pytest.skip(f"no small filesystem for the full-disk case: {reason}")
    disk = small_disk.SmallDisk(tmp_path / "disk", 2 << 20).mount()
    try:
        f = IndexFile(disk.path / "f", slots=500_000, entries=1_000_000, create=True)  # 22 MB sparse on 2 MB
        disk.fill()
        done = 0
        with pytest.raises(OSError) as err:
            for i in range(100_000):
                f.put(f"T#{i}", i, T0)
                done += 1
        assert err.value.errno == errno.ENOSPC
        assert f.count == done + 1  # the refused put changed nothing
        disk.free()
        assert f.put("T#again", 7, T0)
        assert f.lookup("T#again", 5, 0, 2**62) == [7]
        if done:
            assert f.lookup("T#0", 5, 0, 2**62)[-1:] == [0]
        disk.fill()
        before = f.count
        with pytest.raises(OSError) as err:
            for i in range(0, 100_000, 50):
                before = f.count
                f.put_many([key_hash(f"T#b{j}") for j in range(i, i + 50)], list(range(i, i + 50)), [T0] * 50)
        assert err.value.errno == errno.ENOSPC
        assert f.count == before  # the refused batch changed nothing
        disk.free()
        assert f.put_many([key_hash("T#after")], [9], [T0]) == 1 and f.count == before + 1
        assert f.lookup("T#after", 5, 0, 2**62) == [9]
        f.close()
    finally:
        disk.unmount()


async def test_an_index_built_from_what_the_writers_parsed_is_the_one_built_from_the_commitlog(open_store, config,
                                                                                              tmp_path):
    """The master's index (fed by the put path), a slave's (fed by the dispatcher's scan) and one that parses the
    commitlog itself hold the same entries, byte for byte: batches, many keys, non-ASCII keys, rolled-back records,
    delayed messages, a commitlog file rolled mid-way."""
    store = await open_store(replace(config, max_hash_slot_num=101, max_index_num=70))
    n = 0
    for i in range(40):
        batch = [draft(b"x" * 1500, KEYS=f"k{j} shared é{j % 3}", UNIQ_KEY=f"{j:032X}")
                 for j in range(n, n + 1 + i % 4)]
        n += len(batch)
        await store.put_messages("Orders" if i % 3 else "Ünïcode", i % 2, batch)
        if i % 7 == 0:
            await store.put_messages("Orders", 0, [dataclasses.replace(draft(b"r", KEYS="gone"), sys_flag=12),
                                                   draft(b"d", KEYS="later", DELAY="2")])
    assert len(store.commitlog.files.files) > 1
    await async_wait_until(lambda: store.index.position == store.max_phy_offset, 10, "the index to catch up")
    assert store.index_candidates("Orders", "gone", 64, 0, 2**62) == []
    assert len(store.index_candidates("Orders", "shared", 64, 0, 2**62)) > 0

    def built(root, feed_from_scan: bool) -> list[bytes]:
        svc = IndexService(root, store.commitlog, slots=101, entries=70)
        svc.load()
        if feed_from_scan:  # what a slave's dispatcher offers, file by file
            for mf in store.commitlog.files.files:
                records: list = []
                res = scan(mf.mapping, 0, mf.wrote_position, max_size=store.commitlog.max_record_size,
                           delay_ms=[1000] * 18, index_records=records)
                svc.offer_scanned(mf.start_offset, mf.start_offset + res.pos, records)
        while svc.build(1 << 20):
            pass
        svc.flush()
        out = [f.path.read_bytes() for f in svc.files]
        svc.close()
        return out

    store.index.flush()
    master = [f.path.read_bytes() for f in store.index.files]
    assert len(master) > 1
    assert built(tmp_path / "scanned", False) == master
    assert built(tmp_path / "dispatched", True) == master
