"""MessageStore facade: puts, gets (RocketMQ statuses), refusals that leave the disk untouched, listeners."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.config import BrokerRole
from broker.store.message_store import MessageStore, StoreLockedError
from broker.store.types import GetStatus, MessageDraft, PutStatus
from remoting.message_codec import TagFilter, iter_records
from harness.waiting import async_wait_until

from .conftest import SMALL_FILE, assert_queues_match_commitlog, draft, replace, replica_waiter, small_config


def disk_snapshot(root) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name in ("checkpoint", "broker.lock", "abort"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[path] = fh.read()
    return out


async def test_put_then_get_returns_the_same_messages_in_queue_order(store):
    res = await store.put_messages("TopicA", 1, [draft(b"m%d" % i, TAGS="t") for i in range(5)])
    assert res.status is PutStatus.PUT_OK and res.queue_offset == 0 and res.msg_count == 5
    assert res.wrote_offset == 0 and res.next_offset == store.max_phy_offset
    res2 = await store.put_messages("TopicA", 1, [draft(b"m5")])
    assert res2.queue_offset == 5 and res2.wrote_offset == res.next_offset
    got = store.get_message("g", "TopicA", 1, 0, 32)
    assert got.status is GetStatus.FOUND and got.next_begin_offset == 6
    msgs = list(iter_records(b"".join(got.records), check_crc=True))
    assert [m.body for m in msgs] == [b"m%d" % i for i in range(6)]
    assert [m.queue_offset for m in msgs] == list(range(6))
    assert [m.physical_offset for m in msgs[:5]] == res.physical_offsets
    assert msgs[0].born_host == ("10.0.0.7", 50123) and msgs[0].store_host == ("127.0.0.1", 10911)
    assert store.read_message(res.physical_offsets[2]).body == b"m2"
    assert store.min_offset_in_queue("TopicA", 1) == 0 and store.max_offset_in_queue("TopicA", 1) == 6
    assert store.topics() == ["TopicA"] and store.queue_ids("TopicA") == [1]
    assert_queues_match_commitlog(store)


async def test_get_statuses_and_next_offsets_follow_rocketmq(store):
    assert store.get_message("g", "Nope", 0, 0, 1).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    await store.put_messages("T", 0, [draft() for _ in range(3)])
    one = store.get_message("g", "T", 0, 3, 1)
    assert (one.status, one.next_begin_offset, one.min_offset, one.max_offset) == (
        GetStatus.OFFSET_OVERFLOW_ONE,
        3,
        0,
        3,
    )
    badly = store.get_message("g", "T", 0, 10, 1)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)  # min == 0 -> min
    found = store.get_message("g", "T", 0, 1, 1)
    assert (found.status, found.next_begin_offset, len(found.records)) == (GetStatus.FOUND, 2, 1)


async def test_tag_filter_checks_code_then_string(store):
    await store.put_messages("T", 0, [draft(b"a", TAGS="A"), draft(b"b", TAGS="B"), draft(b"c", TAGS="A")])
    got = store.get_message("g", "T", 0, 0, 32, tag_filter=TagFilter("A"))
    assert [m.body for m in iter_records(b"".join(got.records))] == [b"a", b"c"]
    assert got.next_begin_offset == 3
    none = store.get_message("g", "T", 0, 1, 32, tag_filter=TagFilter("Z"))
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 3


async def test_transfer_caps_pick_memory_or_disk_limits_and_max_total_bytes(tmp_path, open_store):
    s = await open_store(
        small_config(tmp_path / "s", max_transfer_count_on_message_in_memory=4, max_transfer_count_on_message_in_disk=2)
    )
    await s.put_messages("T", 0, [draft(b"x" * 100) for _ in range(10)])
    hot = s.get_message("g", "T", 0, 0, 32)
    assert len(hot.records) == 4 and not hot.suggest_pulling_from_slave
    capped = s.get_message("g", "T", 0, 0, 32, max_total_bytes=1)
    assert len(capped.records) == 1  # always at least one message
    await s.stop()
    cold = await open_store(
        small_config(tmp_path / "s", access_message_in_memory_max_ratio=0, max_transfer_count_on_message_in_disk=2)
    )
    got = cold.get_message("g", "T", 0, 0, 32)
    assert len(got.records) == 2 and got.suggest_pulling_from_slave and got.next_begin_offset == 2
    last = cold.get_message("g", "T", 0, 9, 32)
    assert last.suggest_pulling_from_slave  # RocketMQ measures from the last unit start, so still "behind"


@pytest.mark.parametrize(
    ("topic", "queue_id", "drafts", "status", "words"),
    [
        ("T", 0, [], PutStatus.MESSAGE_ILLEGAL, "empty"),
        ("T", -1, [draft()], PutStatus.MESSAGE_ILLEGAL, "negative"),
        ("bad topic", 0, [draft()], PutStatus.MESSAGE_ILLEGAL, "letters"),
        ("T" * 128, 0, [draft()], PutStatus.MESSAGE_ILLEGAL, "127"),
        ("T", 0, [draft(b"")], PutStatus.MESSAGE_ILLEGAL, "empty body"),
        ("T", 0, [draft(b"x" * 1025)], PutStatus.MESSAGE_ILLEGAL, "maxMessageSize=1024"),
        ("T", 0, [draft(), draft(b"ok", K="v" * 33000)], PutStatus.PROPERTIES_SIZE_EXCEEDED, "32767"),
        ("T", 0, [draft(b"ok", K="a\x01b")], PutStatus.MESSAGE_ILLEGAL, "separators"),
        ("T", 0, [MessageDraft(b"ok", {"K\x02": "v"})], PutStatus.MESSAGE_ILLEGAL, "separators"),
        ("T", 0, [draft(b"ok", DELAY="soon")], PutStatus.MESSAGE_ILLEGAL, "DELAY"),
        ("T", 0, [MessageDraft(b"ok", flag=2**31)], PutStatus.MESSAGE_ILLEGAL, "out of range"),
        ("T", 0, [MessageDraft(b"ok", {"K": 1})], PutStatus.MESSAGE_ILLEGAL, "strings"),
        ("T", 0, [MessageDraft("text")], PutStatus.MESSAGE_ILLEGAL, "bytes"),
    ],
)
async def test_bad_input_gets_its_status_and_writes_nothing(
    tmp_path, topic, queue_id, drafts, status, words, open_store
):
    s = await open_store(small_config(tmp_path / "s", max_message_size=1024))
    await s.put_messages("T", 0, [draft(b"before")])
    prefetched = tmp_path / "s" / "commitlog" / f"{SMALL_FILE:020d}"
    await async_wait_until(prefetched.exists, 5.0, "the allocator to pre-create the next commitlog file")
    await s.allocator.wait_idle()  # the file exists before it is sized and mapped: snapshot it once created
    before = disk_snapshot(tmp_path / "s")
    max_before = s.max_phy_offset
    res = await s.put_messages(topic, queue_id, drafts)
    assert res.status is status and words in res.remark
    assert s.max_phy_offset == max_before and s.max_offset_in_queue("T", 0) == 1
    assert disk_snapshot(tmp_path / "s") == before


async def test_record_larger_than_a_commitlog_file_is_illegal(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))
    res = await s.put_messages("T", 0, [draft(b"x" * 4096)])
    assert res.status is PutStatus.MESSAGE_ILLEGAL and "mappedFileSizeCommitLog=4096" in res.remark
    assert s.max_phy_offset == 0


async def test_slave_refuses_puts_and_names_the_master(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    res = await s.put_messages("T", 0, [draft()])
    assert res.status is PutStatus.SERVICE_NOT_AVAILABLE and "SLAVE" in res.remark and "master" in res.remark


async def test_stopped_store_refuses_puts(store):
    await store.stop()
    res = await store.put_messages("T", 0, [draft()])
    assert res.status is PutStatus.SERVICE_NOT_AVAILABLE


async def test_delay_messages_go_to_the_schedule_topic_with_their_real_queue(store):
    res = await store.put_messages("T", 2, [draft(b"now"), draft(b"later", DELAY="3"), draft(b"max", DELAY="99")])
    assert res.status is PutStatus.PUT_OK
    assert store.max_offset_in_queue("T", 2) == 1
    assert store.max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 1
    assert store.max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 17) == 1
    later = store.read_message(res.physical_offsets[1])
    assert later.topic == "SCHEDULE_TOPIC_XXXX" and later.queue_id == 2
    assert later.properties["REAL_TOPIC"] == "T" and later.properties["REAL_QID"] == "2"
    unit = store.consume_queues.find("SCHEDULE_TOPIC_XXXX", 2).unit(0)
    assert unit[2] == later.store_timestamp + 10_000  # level 3 = 10s: the tags code is the delivery time
    assert_queues_match_commitlog(store)


async def test_batches_roll_files_with_a_blank_record_and_span_files_when_larger(store):
    body = b"x" * 1000
    for _ in range(60):  # ~64 KiB: the 60th batch must roll
        res = await store.put_messages("T", 0, [draft(body)])
        assert res.status is PutStatus.PUT_OK
    assert len(store.commitlog.files.files) == 1 or store.commitlog.files.files[1].start_offset == SMALL_FILE
    big = await store.put_messages("T", 0, [draft(body) for _ in range(200)])  # ~3 files
    assert big.status is PutStatus.PUT_OK and big.msg_count == 200
    assert all(p // SMALL_FILE == (p + 1090) // SMALL_FILE for p in big.physical_offsets)
    got = []
    offset = 0
    while True:
        r = store.get_message("g", "T", 0, offset, 32)
        if r.status is not GetStatus.FOUND:
            break
        got += list(iter_records(b"".join(r.records)))
        offset = r.next_begin_offset
    assert len(got) == 260 and [m.queue_offset for m in got] == list(range(260))
    assert_queues_match_commitlog(store)


async def test_second_store_on_the_same_directory_is_refused(config, store):
    other = MessageStore(config)
    with pytest.raises(StoreLockedError, match="belongs to another running broker"):
        await other.start()


async def test_listeners_hear_dispatch_and_append(store):
    dispatched, appended = [], []
    store.add_dispatch_listener(lambda t, q, m: dispatched.append((t, q, m)))
    store.add_append_listener(appended.append)
    await store.put_messages("T", 3, [draft(), draft()])
    assert dispatched == [("T", 3, 2)] and appended == [store.max_phy_offset]


async def test_replica_waiter_status_wins_unless_wait_is_false(store):
    calls = replica_waiter(store, PutStatus.FLUSH_SLAVE_TIMEOUT, "slave slow")
    res = await store.put_messages("T", 0, [draft()])
    assert res.status is PutStatus.FLUSH_SLAVE_TIMEOUT and calls == [res.next_offset]
    res2 = await store.put_messages("T", 0, [draft(WAIT="false")])
    assert res2.status is PutStatus.PUT_OK and len(calls) == 1


async def test_timestamps_and_offset_by_time(store):
    r1 = await store.put_messages("T", 0, [draft()])
    ts = store.store_timestamp_at("T", 0, 0)
    assert ts == r1.store_timestamp
    assert store.store_timestamp_at("T", 0, 5) == 0
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, ts + 10_000) == 0  # past the end: the last offset (max - 1)


async def test_delete_topic_drops_its_queues(store):
    await store.put_messages("T", 0, [draft()])
    store.delete_topic("T")
    assert store.topics() == [] and store.max_offset_in_queue("T", 0) == 0


async def test_commitlog_slice_stays_inside_one_file(store):
    assert store.commitlog_slice(0, 100) is None
    for _ in range(70):
        await store.put_messages("T", 0, [draft(b"x" * 1000)])
    sl = store.commitlog_slice(10, 1 << 20)
    assert sl.phy_offset == 10 and sl.file_position == 10 and sl.length == SMALL_FILE - 10
    assert bytes(sl.view) == os.pread(sl.fd, sl.length, 10)
    sl2 = store.commitlog_slice(SMALL_FILE, 100)
    assert sl2.length == 100 and sl2.file_position == 0
    assert store.commitlog_slice(store.max_phy_offset, 10) is None


async def test_runtime_info_has_broker_status_keys(store):
    await store.put_messages("T", 0, [draft()])
    info = store.runtime_info()
    for key in (
        "commitLogMinOffset",
        "commitLogMaxOffset",
        "commitLogDiskRatio",
        "dispatchBehindBytes",
        "remainHowManyDataToFlush",
        "putMessageTimesTotal",
        "putMessageSizeTotal",
        "getMessageTimesTotal",
        "earliestMessageTimeStamp",
    ):
        assert key in info
    assert info["putMessageTimesTotal"] == "1" and info["commitLogMaxOffset"] == str(store.max_phy_offset)


async def test_clean_restart_keeps_everything(config, store, open_store):
    await store.put_messages("T", 0, [draft(b"a"), draft(b"b")])
    end = store.max_phy_offset
    await store.stop()
    again = await open_store(config)
    assert again.max_phy_offset == end and again.max_offset_in_queue("T", 0) == 2
    res = await again.put_messages("T", 0, [draft(b"c")])
    assert res.queue_offset == 2 and res.wrote_offset == end
    assert_queues_match_commitlog(again)


def test_store_refuses_files_of_another_size(tmp_path):
    import asyncio

    async def go():
        s = MessageStore(small_config(tmp_path / "s"))
        await s.start()
        await s.put_messages("T", 0, [draft()])
        await s.stop()
        other = MessageStore(replace(small_config(tmp_path / "s"), mapped_file_size_commit_log=SMALL_FILE * 2))
        with pytest.raises(ValueError, match="configured file size"):
            await other.start()

    asyncio.run(go())


async def test_scan_commitlog_yields_every_record_across_files(store):
    offsets = []
    for _ in range(80):
        offsets += (await store.put_messages("T", 0, [draft(b"x" * 1000)])).physical_offsets
    scanned = [(off, res.info.queue_offset) for off, res in store.scan_commitlog(0)]
    assert [o for o, _ in scanned] == offsets and [q for _, q in scanned] == list(range(80))


async def test_warm_mapped_files_are_pretouched_in_the_background_and_work(tmp_path, open_store):
    s = await open_store(small_config(tmp_path / "s", warm_mapped_file_enable=True))
    for _ in range(70):  # past the first file: the second one was created (and warmed) by the allocator
        assert (await s.put_messages("T", 0, [draft(b"w" * 1000)])).status is PutStatus.PUT_OK
    assert len(s.commitlog.files.files) == 2 and s.allocator.created >= 2
    assert_queues_match_commitlog(s)


async def test_a_second_process_on_the_same_store_fails_with_a_clear_error(config, store):
    import asyncio
    import sys

    code = (
        "import asyncio, sys\n"
        "from broker.config import MessageStoreConfig\n"
        "from broker.store.message_store import MessageStore\n"
        f"cfg = MessageStoreConfig(store_path_root_dir={str(config.root_dir)!r}, mapped_file_size_commit_log=65536)\n"
        "try:\n"
        "    asyncio.run(MessageStore(cfg).start())\n"
        "except Exception as exc:\n"
        "    print(exc); sys.exit(3)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=str(Path(__file__).resolve().parents[3]),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 3, out
    assert b"belongs to another running broker" in out and b"broker.lock" in out
