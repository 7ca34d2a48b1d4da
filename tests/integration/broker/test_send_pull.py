"""Send and pull over RocketMQ remoting against a real broker process: nothing lost or duplicated, filters, long
polling, offsets, dedup, and the response headers RocketMQ clients read."""

from __future__ import annotations

import asyncio
import time

import pytest

from remoting.codes import RequestCode, ResponseCode
from remoting.message_codec import parse_offset_msg_id
from tests.integration.broker.rpc import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND, message
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration

SEND_HEADER = {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}


async def held_pulls(client) -> int:
    return int((await client.runtime_info())["heldPullRequests"])


async def test_thousands_of_batched_messages_come_back_once_each_in_contiguous_order(client, master):
    topic = "SendPullTopic"
    assert (await client.create_topic(topic, queues=2)).code == 0
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    ids: dict[int, list[str]] = {0: [], 1: []}
    for batch_no in range(40):
        qid = batch_no % 2
        bodies = [f"m-{batch_no}-{i}".encode() for i in range(100)]
        resp = await client.send(topic, qid, [message(b, TAGS="t", KEYS=f"k{batch_no}") for b in bodies])
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert (resp.queue_id, resp.queue_offset) == (qid, len(sent[qid]))
        assert len(resp.msg_ids) == 100
        assert parse_offset_msg_id(resp.msg_ids[0])[0] == ("127.0.0.1", master.port)
        sent[qid].extend(bodies)
        ids[qid].extend(resp.msg_ids)
    for qid in (0, 1):
        got = await client.pull_all("g-sendpull", topic, qid, max_nums=64)
        assert [m.body for m in got] == sent[qid]
        assert [m.queue_offset for m in got] == list(range(len(sent[qid])))
        assert [m.offset_msg_id for m in got] == ids[qid]
        assert all(m.topic == topic and m.queue_id == qid for m in got)


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
async def test_a_single_send_with_v1_or_v2_names_is_stored_with_cluster_added_and_wait_dropped(client, code):
    topic = f"SingleSend{int(code)}"
    resp = await client.send(topic, 0, [message(b"one", TAGS="t", KEYS="k", WAIT="true")], code=code)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert set(resp.ext) == SEND_HEADER and resp.ext["MSG_REGION"] == "DefaultRegion" and resp.ext["TRACE_ON"] == "true"
    [msg] = (await client.pull("g-single", topic, 0, 0)).messages
    assert msg.properties == {"TAGS": "t", "KEYS": "k", "CLUSTER": "DefaultCluster"}
    assert msg.offset_msg_id == resp.msg_ids[0]


async def test_a_batch_stores_each_messages_own_properties_then_the_batchs(client):
    topic = "BatchProps"
    resp = await client.send(
        topic, 0, [message(b"a", UNIQ_KEY="U1", TAGS="x"), message(b"b")], batch_properties={"WAIT": "true", "P": "q"}
    )
    assert resp.code == ResponseCode.SUCCESS and set(resp.ext) == SEND_HEADER
    got = (await client.pull("g-bprops", topic, 0, 0)).messages
    assert [m.properties for m in got] == [
        {"UNIQ_KEY": "U1", "TAGS": "x", "P": "q", "CLUSTER": "DefaultCluster"},
        {"P": "q", "CLUSTER": "DefaultCluster"},
    ]


async def test_every_send_answer_carries_the_send_header_even_a_refusal(client):
    refused = await client.send("SCHEDULE_TOPIC_XXXX", 0, [message(b"x")])
    assert refused.code == ResponseCode.NO_PERMISSION
    assert set(refused.ext) == SEND_HEADER and refused.ext["queueOffset"] == "-1"


async def test_a_negative_queue_id_lets_the_broker_pick_a_writable_queue(client):
    topic = "AnyQueueTopic"
    assert (await client.create_topic(topic, queues=3)).code == 0
    picked = set()
    for _ in range(20):
        resp = await client.send(topic, -1, [message(b"x")])
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        picked.add(resp.queue_id)
    assert picked <= {0, 1, 2} and picked


async def test_a_pull_returns_only_messages_whose_tag_matches_the_subscription(client):
    topic = "TagTopic"
    tags = ["a", "b", "c"] * 10
    resp = await client.send(topic, 0, [message(f"{i}".encode(), TAGS=t) for i, t in enumerate(tags)])
    assert resp.code == 0, resp.remark
    got = await client.pull_all("g-tags", topic, 0, subscription="a || c", max_nums=32)
    assert [m.tags for m in got] == [t for t in tags if t in ("a", "c")]


async def test_a_pull_without_the_subscription_flag_uses_the_subscription_of_the_groups_heartbeat(client):
    topic, group = "HeartbeatSubTopic", "g-hb-sub"
    await client.send(topic, 0, [message(f"{i}".encode(), TAGS=t) for i, t in enumerate("abab")])
    none = await client.pull(group, topic, 0, 0, sys_flag=0, subscription=None)
    assert none.code == ResponseCode.SUBSCRIPTION_NOT_EXIST and "HEART_BEAT" in none.remark
    assert (await client.heartbeat("client-hb", {group: {topic: "b"}})).code == 0
    got = await client.pull(group, topic, 0, 0, sys_flag=0, subscription=None)
    assert got.code == ResponseCode.SUCCESS and [m.tags for m in got.messages] == ["b", "b"]
    other = await client.pull(group, "SomeOtherTopic", 0, 0, sys_flag=0, subscription=None)
    assert other.code in (ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.TOPIC_NOT_EXIST)
    newer = await client.pull(group, topic, 0, 0, sys_flag=0, subscription=None, sub_version=2)
    assert newer.code == ResponseCode.SUBSCRIPTION_NOT_LATEST


async def test_a_held_pull_is_answered_by_the_next_send_before_its_suspend_time(client):
    topic = "LongPollTopic"
    await client.create_topic(topic, queues=1)
    # held for ten minutes: an answer within the test's timeout can only come from the arrival waking it
    pending = asyncio.ensure_future(
        client.pull("g-long", topic, 0, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION, suspend_ms=600_000, timeout=660)
    )
    await async_wait_until(lambda: held_pulls(client), 5, "the pull was never parked")
    assert not pending.done()
    assert (await client.send(topic, 0, [message(b"wake up")])).code == 0
    got = await asyncio.wait_for(pending, timeout=60)
    assert got.code == ResponseCode.SUCCESS and [m.body for m in got.messages] == [b"wake up"]
    assert await held_pulls(client) == 0


async def test_a_held_pull_with_nothing_new_answers_not_found_after_its_suspend_time(client):
    topic = "LongPollTimeoutTopic"
    await client.create_topic(topic, queues=1)
    started = time.monotonic()
    got = await client.pull("g-long2", topic, 0, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION, suspend_ms=600)
    assert got.code == ResponseCode.PULL_NOT_FOUND and got.remark.startswith("NO_MATCHED_LOGIC_QUEUE")  # no consume queue yet
    assert time.monotonic() - started >= 0.5
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (0, 0, 0)


async def test_commit_on_pull_stores_the_carried_offset_on_the_master(client):
    topic = "CommitOnPullTopic"
    await client.create_topic(topic, queues=1)
    await client.send(topic, 0, [message(b"x%d" % i) for i in range(5)])
    got = await client.pull("g-cop", topic, 0, 3, sys_flag=FLAG_COMMIT_OFFSET | FLAG_SUBSCRIPTION, commit_offset=3)
    assert got.code == 0 and got.remark == "FOUND"
    assert await client.query_offset("g-cop", topic, 0) == (ResponseCode.SUCCESS, 3)


async def test_committed_offsets_are_returned_and_may_move_back_on_an_explicit_commit(client):
    topic = "OffsetTopic"
    await client.create_topic(topic, queues=1)
    await client.send(topic, 0, [message(b"o%d" % i) for i in range(7)])
    await client.heartbeat("c-off", consumers={"g-off": {topic: "*"}})
    assert (await client.commit_offset("g-off", topic, 0, 7)).code == 0
    assert await client.query_offset("g-off", topic, 0) == (0, 7)
    assert (await client.commit_offset("g-off", topic, 0, 5)).code == 0
    assert await client.query_offset("g-off", topic, 0) == (0, 5)


async def test_a_oneway_offset_commit_is_stored(client):
    await client.create_topic("OnewayOffsetTopic", queues=1)
    await client.send("OnewayOffsetTopic", 0, [message(b"w%d" % i) for i in range(4)])
    await client.heartbeat("c-oneway", consumers={"g-oneway": {"OnewayOffsetTopic": "*"}})
    await client.oneway(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "g-oneway", "topic": "OnewayOffsetTopic", "queueId": "0", "commitOffset": "4"},
    )

    async def stored():
        return await client.query_offset("g-oneway", "OnewayOffsetTopic", 0) == (0, 4)

    await async_wait_until(stored, 5, "the oneway commit was not stored")


async def test_a_group_without_commits_on_a_queue_starting_at_zero_reads_from_zero(client):
    assert await client.query_offset("g-fresh", "NeverUsedTopic", 0) == (ResponseCode.SUCCESS, 0)


async def test_queue_offsets_and_search_by_time_answer_in_the_offset_header(client):
    topic = "QueueOffsetTopic"
    await client.create_topic(topic, queues=1)
    before = int(time.time() * 1000) - 1
    await client.send(topic, 0, [message(b"1"), message(b"2"), message(b"3")])
    ext = {"topic": topic, "queueId": "0"}
    assert (await client.request(RequestCode.GET_MAX_OFFSET, ext)).ext["offset"] == "3"
    assert (await client.request(RequestCode.GET_MIN_OFFSET, ext)).ext["offset"] == "0"
    found = await client.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**ext, "timestamp": str(before)})
    assert (found.code, found.ext["offset"]) == (0, "0")
    earliest = await client.request(RequestCode.GET_EARLIEST_MSG_STORETIME, ext)
    assert earliest.code == 0 and int(earliest.ext["timestamp"]) >= before


async def test_pulling_past_the_end_says_not_found_and_far_past_says_offset_moved(client):
    topic = "EdgeTopic"
    await client.create_topic(topic, queues=1)
    await client.send(topic, 0, [message(b"1"), message(b"2")])
    at_end = await client.pull("g-edge", topic, 0, 2)
    assert at_end.code == ResponseCode.PULL_NOT_FOUND and at_end.max_offset == 2
    far = await client.pull("g-edge", topic, 0, 1000)
    # RocketMQ's correction: a queue that still starts at 0 sends the consumer back to 0.
    assert far.code == ResponseCode.PULL_OFFSET_MOVED and far.next_begin_offset == 0


async def test_a_groups_own_retry_topic_exists_as_soon_as_the_group_pulls_it(client):
    got = await client.pull("g-fresh-retry", "%RETRY%g-fresh-retry", 0, 0)
    assert got.code == ResponseCode.PULL_NOT_FOUND
    other = await client.pull("g-fresh-retry", "%RETRY%someone-else", 0, 0)
    assert other.code == ResponseCode.TOPIC_NOT_EXIST


async def test_a_master_asked_for_a_topic_it_lacks_says_to_create_it(client):
    got = await client.pull("g-missing", "NeverCreatedHere", 0, 0)
    assert got.code == ResponseCode.TOPIC_NOT_EXIST
    assert got.remark == (
        "topic[NeverCreatedHere] not exist on broker broker-a; create it (mqctl updateTopic -t NeverCreatedHere) or"
        " refresh the route"
    )


async def test_a_dedup_send_stores_each_uniq_key_once_and_repeats_the_first_result(client):
    topic = "DedupTopic"
    await client.create_topic(topic, queues=2)
    first = await client.send(topic, 0, [message(b"a", UNIQ_KEY="A"), message(b"b", UNIQ_KEY="B")], dedup=True)
    assert first.code == ResponseCode.SUCCESS, first.remark
    again = await client.send(topic, 1, [message(b"b", UNIQ_KEY="B"), message(b"c", UNIQ_KEY="C")], dedup=True)
    assert again.code == ResponseCode.SUCCESS and "1 of 2 messages were stored before" in again.remark
    assert again.msg_ids[0] == first.msg_ids[1]  # B answered with its first result
    assert (again.queue_id, again.queue_offset) == (0, 1)
    single = await client.send(topic, 1, [message(b"c", UNIQ_KEY="C")], dedup=True)
    assert single.msg_ids == again.msg_ids[1:] and "stored before" in single.remark
    plain = await client.send(topic, 0, [message(b"a", UNIQ_KEY="A")])  # without dedup: stored again
    assert plain.code == ResponseCode.SUCCESS and plain.queue_offset == 2
    q0 = [m.body for m in await client.pull_all("g-dedup", topic, 0)]
    q1 = [m.body for m in await client.pull_all("g-dedup", topic, 1)]
    assert (q0, q1) == ([b"a", b"b", b"a"], [b"c"])


async def test_many_requests_in_flight_on_one_connection_are_answered_by_opaque_around_a_held_pull(client):
    """One connection, as RocketMQ clients use it: a parked pull does not hold back the sends behind it."""
    topic = "PipelineTopic"
    await client.create_topic(topic, queues=1)
    held = asyncio.ensure_future(
        client.pull("g-pipe", topic, 0, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION, suspend_ms=5000)
    )
    await async_wait_until(lambda: held_pulls(client), 5, "the pull was never parked")
    sends = await asyncio.gather(*(client.send(topic, 0, [message(b"%d" % i)]) for i in range(50)))
    assert sorted(s.queue_offset for s in sends) == list(range(50))
    got = await asyncio.wait_for(held, 4)
    assert got.code == ResponseCode.SUCCESS and got.messages
    assert len(client.remoting._conns) == 1


async def test_a_connection_that_sends_a_frame_that_does_not_decode_is_closed_and_others_are_served(client):
    conn = await client.remoting.connection(client.addr)
    conn.transport.write(b"\x00\x00\x00\x08\x09\x00\x00\x00garbage!")  # serialize type 9 does not exist
    await async_wait_until(lambda: not conn.is_open, 5, "the broker kept a connection that spoke garbage")
    resp = await client.send("AfterGarbage", 0, [message(b"fine")])  # a new connection
    assert resp.code == ResponseCode.SUCCESS
