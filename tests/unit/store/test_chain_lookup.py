"""A record read at a caller's commitlog offset must start where the commitlog's own chain of records has one
(issue 22 item 6): the consume-queue unit check and the bounded size-field walk, over a real store."""

from __future__ import annotations

from broker.config import BrokerRole
from broker.record_reader import MAX_WALK_RECORDS, RecordRefusal, record_at
from broker.store.get import unit_points_at, walk_reaches
from remoting.codes import ResponseCode
from remoting.message_codec import HEADER_SIZE, check_record
from tests.stored_records import stored_record
from harness.waiting import async_wait_until
from tests.unit.store.conftest import draft, small_config

MAX = 1 << 20


async def put_genuine_and_counterfeit(store):
    genuine = await store.put_messages("T", 0, [draft(b"m%d" % i) for i in range(3)])
    claimed = store.max_phy_offset + HEADER_SIZE
    fake = stored_record(topic_bytes=b"T", queue_id=0, queue_offset=3, physical_offset=claimed, body=b"fake")
    carrier = await store.put_messages("T", 0, [draft(fake)])
    assert carrier.wrote_offset + HEADER_SIZE == claimed
    return genuine.physical_offsets, claimed


async def test_the_unit_check_confirms_genuine_records_only(store):
    offsets, claimed = await put_genuine_and_counterfeit(store)
    for qoff, phy in enumerate(offsets):
        size = check_record(store.commitlog.read(phy, 256) or b"", 0).size
        assert unit_points_at(store.consume_queues, "T", 0, qoff, phy, size)
        assert not unit_points_at(store.consume_queues, "T", 0, qoff, phy + 1, size)
        assert not unit_points_at(store.consume_queues, "T", 0, qoff, phy, size + 1)
    assert not unit_points_at(store.consume_queues, "T", 0, 3, claimed, 100)
    assert not unit_points_at(store.consume_queues, "Nope", 0, 0, offsets[0], 100)


async def test_the_walk_lands_on_record_starts_and_gives_up_past_its_budget(store):
    offsets, claimed = await put_genuine_and_counterfeit(store)
    start = store.commitlog.files.first.start_offset
    assert all(walk_reaches(store.commitlog, start, phy, MAX_WALK_RECORDS) for phy in offsets)
    assert walk_reaches(store.commitlog, start, claimed, MAX_WALK_RECORDS) is False
    assert walk_reaches(store.commitlog, start, offsets[2], 1) is None  # two steps needed, one allowed
    assert walk_reaches(store.commitlog, offsets[1], offsets[2], 1) is True


async def test_record_at_serves_genuine_records_and_refuses_the_counterfeit(store):
    offsets, claimed = await put_genuine_and_counterfeit(store)
    for phy in offsets:
        assert isinstance(record_at(store, phy, MAX, "b"), bytes)
    refusal = record_at(store, claimed, MAX, "b")
    assert isinstance(refusal, RecordRefusal) and refusal.code is ResponseCode.INVALID_PARAMETER
    assert "index has no message starting there" in refusal.remark


async def test_past_the_dispatched_offset_the_walk_decides(store, open_store, tmp_path):
    """A slave's replicated records have no unit until its dispatcher reaches them: until then the walk from the
    dispatched offset (a record start) serves the genuine ones and refuses the counterfeit."""
    offsets, claimed = await put_genuine_and_counterfeit(store)
    slave = await open_store(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    mf = store.commitlog.files.first
    slave.append_replicated(0, bytes(mf.buffer[: mf.wrote_position]))
    assert slave.dispatched_phy_offset == 0  # no await since the append: the dispatcher has not run
    assert isinstance(record_at(slave, offsets[2], MAX, "s"), bytes)
    refusal = record_at(slave, claimed, MAX, "s")
    assert isinstance(refusal, RecordRefusal) and refusal.code is ResponseCode.INVALID_PARAMETER
    await async_wait_until(lambda: slave.dispatched_phy_offset == store.max_phy_offset, 5, "the slave never dispatched")
    assert isinstance(record_at(slave, offsets[2], MAX, "s"), bytes)
    assert isinstance(record_at(slave, claimed, MAX, "s"), RecordRefusal)
