"""Send and pull against a real broker process: nothing lost or duplicated, filters, long polling, offsets."""

from __future__ import annotations

import asyncio
import time

import pytest

from remoting.codes import ResponseCode
from remoting.message_codec import offset_msg_id
from tests.integration.broker.rpc import FLAG_COMMIT_OFFSET, FLAG_SUSPEND, message

pytestmark = pytest.mark.integration


async def test_thousands_of_batched_messages_come_back_once_each_in_contiguous_order(client, master):
    topic = "SendPullTopic"
    assert (await client.create_topic(topic, queues=2)).code == 0
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    for batch_no in range(40):
        qid = batch_no % 2
        bodies = [f"m-{batch_no}-{i}".encode() for i in range(100)]
        resp = await client.send(topic, qid, [message(b, TAGS="t", KEYS=f"k{batch_no}") for b in bodies])
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.queue_offset == len(sent[qid])
        assert len(resp.msg_ids) == 100 and resp.broker_name == "broker-a"
        assert resp.msg_ids[0] == offset_msg_id(("127.0.0.1", master.port), resp.physical_offset)
        sent[qid].extend(bodies)
    for qid in (0, 1):
        got = await client.pull_all("g-sendpull", topic, qid, max_nums=64)
        assert [m.body for m in got] == sent[qid]
        assert [m.queue_offset for m in got] == list(range(len(sent[qid])))
        assert all(m.topic == topic and m.queue_id == qid for m in got)


async def test_a_pull_returns_only_messages_whose_tag_matches_the_subscription(client):
    topic = "TagTopic"
    tags = ["a", "b", "c"] * 10
    resp = await client.send(topic, 0, [message(f"{i}".encode(), TAGS=t) for i, t in enumerate(tags)])
    assert resp.code == 0, resp.remark
    got = await client.pull_all("g-tags", topic, 0, subscription="a || c", max_nums=32)
    assert [m.tags for m in got] == [t for t in tags if t in ("a", "c")]


async def test_a_held_pull_wakes_within_a_fraction_of_a_second_of_a_send(client):
    topic = "LongPollTopic"
    await client.create_topic(topic, queues=1)
    pending = asyncio.ensure_future(client.pull("g-long", topic, 0, 0, sys_flag=FLAG_SUSPEND, suspend_ms=5000))
    await asyncio.sleep(0.3)  # let the pull reach the broker and be parked
    assert not pending.done()
    sent_at = time.monotonic()
    assert (await client.send(topic, 0, [message(b"wake up")])).code == 0
    got = await asyncio.wait_for(pending, timeout=4)
    waited = time.monotonic() - sent_at
    assert got.code == ResponseCode.SUCCESS and [m.body for m in got.messages] == [b"wake up"]
    assert waited < 0.2, f"the held pull answered {waited:.3f}s after the send (measured ~5 ms when idle)"


async def test_a_held_pull_with_nothing_new_answers_not_found_after_its_suspend_time(client):
    topic = "LongPollTimeoutTopic"
    await client.create_topic(topic, queues=1)
    started = time.monotonic()
    got = await client.pull("g-long2", topic, 0, 0, sys_flag=FLAG_SUSPEND, suspend_ms=600)
    elapsed = time.monotonic() - started
    assert got.code == ResponseCode.PULL_NOT_FOUND
    assert 0.5 <= elapsed < 3


async def test_commit_on_pull_stores_the_carried_offset_on_the_master(client):
    topic = "CommitOnPullTopic"
    await client.create_topic(topic, queues=1)
    await client.send(topic, 0, [message(b"x%d" % i) for i in range(5)])
    got = await client.pull("g-cop", topic, 0, 3, sys_flag=FLAG_COMMIT_OFFSET, commit_offset=3)
    assert got.code == 0
    q = await client.query_offset("g-cop", topic, 0)
    assert (q.code, q.offset) == (ResponseCode.SUCCESS, 3)


async def test_committed_offsets_are_returned_and_may_move_back_on_an_explicit_commit(client):
    topic = "OffsetTopic"
    await client.create_topic(topic, queues=1)
    assert (await client.commit_offset("g-off", topic, 0, 7)).code == 0
    assert (await client.query_offset("g-off", topic, 0)).offset == 7
    assert (await client.commit_offset("g-off", topic, 0, 5)).code == 0
    assert (await client.query_offset("g-off", topic, 0)).offset == 5


async def test_a_group_without_commits_on_a_queue_starting_at_zero_reads_from_zero(client):
    q = await client.query_offset("g-fresh", "NeverUsedTopic", 0)
    assert (q.code, q.offset) == (ResponseCode.SUCCESS, 0)


async def test_pulling_past_the_end_says_not_found_and_far_past_says_offset_moved(client):
    topic = "EdgeTopic"
    await client.create_topic(topic, queues=1)
    await client.send(topic, 0, [message(b"1"), message(b"2")])
    at_end = await client.pull("g-edge", topic, 0, 2)
    assert at_end.code == ResponseCode.PULL_NOT_FOUND
    far = await client.pull("g-edge", topic, 0, 1000)
    # RocketMQ's correction: a queue that still starts at 0 sends the consumer back to 0.
    assert far.code == ResponseCode.PULL_OFFSET_MOVED and far.response.next_begin_offset == 0


async def test_a_groups_own_retry_topic_exists_as_soon_as_the_group_pulls_it(client):
    got = await client.pull("g-fresh-retry", "%RETRY%g-fresh-retry", 0, 0)
    assert got.code == ResponseCode.PULL_NOT_FOUND
    other = await client.pull("g-fresh-retry", "%RETRY%someone-else", 0, 0)
    assert other.code == ResponseCode.TOPIC_NOT_EXIST


async def test_a_dedup_send_stores_each_uniq_key_once_and_repeats_the_first_result(client):
    topic = "DedupTopic"
    await client.create_topic(topic, queues=2)
    first = await client.send(topic, 0, [message(b"a", UNIQ_KEY="A"), message(b"b", UNIQ_KEY="B")], dedup=True)
    assert first.code == ResponseCode.SUCCESS, first.remark
    again = await client.send(topic, 1, [message(b"b", UNIQ_KEY="B"), message(b"c", UNIQ_KEY="C")], dedup=True)
    assert again.code == ResponseCode.SUCCESS and "1 of 2 messages were stored before" in again.remark
    assert again.msg_ids[0] == first.msg_ids[1]  # B answered with its first result
    assert (again.queue_id, again.queue_offset) == (0, 1)
    plain = await client.send(topic, 0, [message(b"a", UNIQ_KEY="A")])  # without dedup: stored again
    assert plain.code == ResponseCode.SUCCESS and plain.queue_offset == 2
    q0 = [m.body for m in await client.pull_all("g-dedup", topic, 0)]
    q1 = [m.body for m in await client.pull_all("g-dedup", topic, 1)]
    assert (q0, q1) == ([b"a", b"b", b"a"], [b"c"])
