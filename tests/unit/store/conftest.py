"""Shared helpers for the store tests: small configs, a consume-queue oracle rebuilt from the commitlog."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from broker.config import MessageStoreConfig
from broker.store.consume_queue import PLACEHOLDER_SIZE, UNIT
from broker.store.message_store import MessageStore
from broker.store.put_prepare import tags_hash
from broker.store.types import SCHEDULE_TOPIC, MessageDraft, PutStatus
from remoting.message_codec import RecordStatus, check_record, property_value

SMALL_FILE = 64 * 1024


def small_config(root: Path, **overrides) -> MessageStoreConfig:
    base = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": SMALL_FILE,
        "mapped_file_size_consume_queue": 20 * 64,
        "warm_mapped_file_enable": False,
        "flush_interval_commit_log": 50,
        "flush_interval_consume_queue": 50,
        "clean_resource_interval": 100_000,
    }
    base.update(overrides)
    return MessageStoreConfig(**base)


@pytest.fixture
def config(tmp_path: Path) -> MessageStoreConfig:
    return small_config(tmp_path / "store")


@pytest.fixture
async def store(config: MessageStoreConfig):
    s = MessageStore(config)
    await s.start()
    yield s
    if s.running:
        await s.stop()


def draft(body: bytes = b"hello", **props: str) -> MessageDraft:
    return MessageDraft(
        body=body, properties=dict(props), born_timestamp=1_700_000_000_000, born_host=("10.0.0.7", 50123)
    )


def replica_waiter(store: MessageStore, status: PutStatus = PutStatus.PUT_OK, remark: str = "", *,
                   release: asyncio.Event | None = None) -> list[int]:
    """Stand in for the HA side: ``store``'s replica waiter answers ``(status, remark)``, once ``release`` is set
    when one is given; returns the list of the end offsets it was asked to wait for, in the order asked."""
    asked: list[int] = []

    async def waiter(next_offset: int, deadline: float | None = None) -> tuple[PutStatus, str]:
        asked.append(next_offset)
        if release is not None:
            await release.wait()
        return status, remark

    store.set_replica_waiter(waiter)
    return asked


def commitlog_records(store: MessageStore) -> list:
    """Every valid record of the commitlog, scanned independently of the store's own bookkeeping."""
    out = []
    for mf in store.commitlog.files.files:
        buf = mf.buffer[: mf.wrote_position]
        pos = 0
        while pos < len(buf):
            res = check_record(buf, pos, check_crc=True)
            if res.status is RecordStatus.BLANK:
                break
            assert res.status is RecordStatus.VALID, (mf.path, pos, res)
            assert res.info.physical_offset == mf.start_offset + pos
            out.append(res.info)
            pos += res.size
    return out


def expected_queues(store: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int, int]]]:
    """(topic, queue) -> [(queue offset, phy offset, size, tags code)] as a rebuild from the commitlog gives."""
    delay = store.config.delay_levels_ms
    out: dict = {}
    for info in commitlog_records(store):
        if info.topic == SCHEDULE_TOPIC:
            level = min(max(int(property_value(info.properties, "DELAY") or 1), 1), len(delay))
            code = info.store_timestamp + delay[level - 1]
        else:
            tags = property_value(info.properties, "TAGS")
            code = tags_hash(tags) if tags else 0
        out.setdefault((info.topic, info.queue_id), []).append(
            (info.queue_offset, info.physical_offset, info.size, code)
        )
    return out


def actual_queues(store: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int, int]]]:
    out: dict = {}
    for topic in store.topics():
        for qid in store.queue_ids(topic):
            cq = store.consume_queues.find(topic, qid)
            units = []
            for q in range(cq.min_offset, cq.max_offset):
                phy, size, code = UNIT.unpack_from(cq.read_units(q, 1))
                if size != PLACEHOLDER_SIZE:
                    units.append((q, phy, size, code))
            if units:
                out[(topic, qid)] = units
    return out


def assert_queues_match_commitlog(store: MessageStore) -> None:
    expected = expected_queues(store)
    actual = actual_queues(store)
    assert actual == expected
    for (topic, qid), units in expected.items():
        assert store.max_offset_in_queue(topic, qid) == units[-1][0] + 1


def replace(cfg: MessageStoreConfig, **kw) -> MessageStoreConfig:
    return dataclasses.replace(cfg, **kw)


@pytest.fixture
async def open_store():
    """``await open_store(config)``: a started MessageStore, stopped at teardown (newest first) unless the test
    stopped or killed it, so a test that opens stores of its own needs no try/finally."""
    opened: list[MessageStore] = []

    async def start(config: MessageStoreConfig) -> MessageStore:
        s = MessageStore(config)
        await s.start()
        opened.append(s)
        return s

    yield start
    for s in reversed(opened):
        await s.stop()  # a no-op for a stopped or killed store
