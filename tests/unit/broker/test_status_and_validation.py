"""The status -> ResponseCode table, the request validators and the schedule service's pure helpers."""

from __future__ import annotations

import asyncio

import pytest

from broker.processors import validate
from broker.processors.send import answer_deadline
from broker.processors.status_map import get_code, pull_remark, put_code
from broker.schedule import due_prefix, redelivery_draft, runs_by_target
from broker.store.types import GetStatus, PutStatus
from remoting.codes import ResponseCode as RC
from remoting.message_codec import StoredMessage


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (PutStatus.PUT_OK, RC.SUCCESS),
        (PutStatus.FLUSH_DISK_TIMEOUT, RC.FLUSH_DISK_TIMEOUT),
        (PutStatus.SLAVE_NOT_AVAILABLE, RC.SLAVE_NOT_AVAILABLE),
        (PutStatus.FLUSH_SLAVE_TIMEOUT, RC.FLUSH_SLAVE_TIMEOUT),
        (PutStatus.MESSAGE_ILLEGAL, RC.MESSAGE_ILLEGAL),
        (PutStatus.PROPERTIES_SIZE_EXCEEDED, RC.MESSAGE_ILLEGAL),
        (PutStatus.SERVICE_NOT_AVAILABLE, RC.SERVICE_NOT_AVAILABLE),
        (PutStatus.CREATE_MAPPED_FILE_FAILED, RC.SYSTEM_ERROR),
        (PutStatus.UNKNOWN_ERROR, RC.SYSTEM_ERROR),
    ],
)
def test_every_put_status_maps_to_its_code_with_a_remark_unless_ok(status, code):
    got, remark = put_code(status, "")
    assert got == code
    assert bool(remark) == (status is not PutStatus.PUT_OK)


def test_the_stores_own_remark_comes_first():
    assert put_code(PutStatus.MESSAGE_ILLEGAL, "body too big")[1].startswith("body too big; ")


@pytest.mark.parametrize(
    ("status", "offset", "code"),
    [
        (GetStatus.FOUND, 5, RC.SUCCESS),
        (GetStatus.NO_MESSAGE_IN_QUEUE, 0, RC.PULL_NOT_FOUND),
        (GetStatus.NO_MESSAGE_IN_QUEUE, 3, RC.PULL_OFFSET_MOVED),
        (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, RC.PULL_NOT_FOUND),
        (GetStatus.NO_MATCHED_LOGIC_QUEUE, 1, RC.PULL_OFFSET_MOVED),
        (GetStatus.OFFSET_OVERFLOW_ONE, 5, RC.PULL_NOT_FOUND),
        (GetStatus.OFFSET_OVERFLOW_BADLY, 5, RC.PULL_OFFSET_MOVED),
        (GetStatus.OFFSET_TOO_SMALL, 5, RC.PULL_OFFSET_MOVED),
        (GetStatus.OFFSET_FOUND_NULL, 5, RC.PULL_NOT_FOUND),
        (GetStatus.NO_MATCHED_MESSAGE, 5, RC.PULL_RETRY_IMMEDIATELY),
        (GetStatus.MESSAGE_WAS_REMOVING, 5, RC.PULL_RETRY_IMMEDIATELY),
    ],
)
def test_get_statuses_map_to_pull_codes_as_in_spec_5_2(status, offset, code):
    assert get_code(status, offset) == code


def test_group_names_up_to_120_characters_are_valid():
    assert validate.group_name("g" * 120) is None
    assert validate.group_name("g" * 121).code == RC.INVALID_PARAMETER


def test_retry_topics_may_be_longer_than_ordinary_topics():
    assert validate.topic_name("%RETRY%" + "g" * 120) is None
    assert validate.topic_name("t" * 127) is None
    assert validate.topic_name("t" * 128) is not None


def test_a_pull_remark_starts_with_the_store_status_and_says_what_to_do_unless_found():
    assert pull_remark(RC.SUCCESS, GetStatus.FOUND) == "FOUND"
    remark = pull_remark(RC.PULL_NOT_FOUND, GetStatus.OFFSET_OVERFLOW_ONE)
    assert remark.startswith("OFFSET_OVERFLOW_ONE: ") and "nextBeginOffset" in remark


def stored(qoff: int, store_ts: int, topic: str = "T", qid: str = "0") -> StoredMessage:
    return StoredMessage(
        topic="SCHEDULE_TOPIC_XXXX",
        queue_id=0,
        queue_offset=qoff,
        physical_offset=qoff * 100,
        store_size=100,
        body=b"b",
        properties={"REAL_TOPIC": topic, "REAL_QID": qid, "DELAY": "1", "KEYS": "k"},
        flag=0,
        sys_flag=0,
        born_timestamp=1,
        born_host=("1.2.3.4", 5),
        store_timestamp=store_ts,
        store_host=("127.0.0.1", 1),
        reconsume_times=2,
        body_crc=0,
    )


def test_only_the_due_prefix_of_a_level_is_delivered():
    msgs = [stored(0, 1000), stored(1, 1500), stored(2, 3000)]
    due, wait = due_prefix(msgs, delay_ms=1000, now_ms=2600)
    assert [m.queue_offset for m in due] == [0, 1] and wait == 1400
    assert due_prefix(msgs, 1000, 10_000) == (msgs, 0)


def test_due_messages_are_re_put_in_runs_per_target_queue_without_the_delay():
    msgs = [stored(0, 1, "A", "0"), stored(1, 1, "A", "0"), stored(2, 1, "B", "1"), stored(3, 1, "A", "0")]
    runs = runs_by_target(msgs)
    assert [(t, q, [m.queue_offset for m in run]) for t, q, run in runs] == [
        ("A", 0, [0, 1]),
        ("B", 1, [2]),
        ("A", 0, [3]),
    ]
    draft = redelivery_draft(msgs[0])
    assert "DELAY" not in draft.properties and draft.properties["KEYS"] == "k" and draft.reconsume_times == 2


async def test_a_send_is_answered_a_margin_before_the_senders_timeout():
    loop = asyncio.get_running_loop()
    for timeout_ms, margin_ms in ((5000, 500), (3000, 300), (1000, 100), (150, 75), (0, 0), (-5, 0)):
        before = loop.time()
        deadline = answer_deadline(timeout_ms)
        assert before + (max(0, timeout_ms) - margin_ms) / 1000 <= deadline <= loop.time() + (
            max(0, timeout_ms) - margin_ms) / 1000
    assert answer_deadline(None) is None  # a RocketMQ client: the broker waits as configured
