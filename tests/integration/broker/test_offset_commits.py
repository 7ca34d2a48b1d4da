"""A consumer offset commit is stored only when it can be true (reliability.md §7 case 24; issue 12 item 9).

UPDATE_CONSUMER_OFFSET (15) refuses an offset past the queue's max offset (2^63-1 included), a queue id past the
topic's queues, a topic or a group the broker does not know, each with its own code, and stores nothing. The pull's
COMMIT_OFFSET flag stores only a possible offset and still answers the pull. A refused oneway commit, which has no
answer, is one rate-limited warning in the broker's log.
"""

from __future__ import annotations

import pytest

from remoting import fastjson
from remoting.codes import RequestCode
from remoting.codes import ResponseCode as RC
from remoting.frame_codec import RemotingCommand
from remoting.message_headers import PULL_COMMIT_OFFSET, PullHeader
from tests.integration.broker.rpc import message
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration

TOPIC = "CommitT"
GROUP = "g-commit"
SENT = 3  # messages in queue 0: its max offset


@pytest.fixture
async def queue(client):
    """TOPIC with 4 queues, SENT messages in queue 0, GROUP known (heartbeat) with offset 2 committed."""
    assert (await client.create_topic(TOPIC, queues=4)).code == RC.SUCCESS
    max_offset = await client.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
    for i in range(int(max_offset.ext["offset"]), SENT):
        assert (await client.send(TOPIC, 0, [message(b"m%d" % i)])).code == RC.SUCCESS
    assert (await client.heartbeat("c-commit", consumers={GROUP: {TOPIC: "*"}})).code == RC.SUCCESS
    assert (await client.commit_offset(GROUP, TOPIC, 0, 2)).code == RC.SUCCESS
    return client


@pytest.mark.parametrize(
    ("group", "topic", "queue_id", "offset", "code", "remark_part"),
    [
        (GROUP, TOPIC, 0, 2**63 - 1, RC.INVALID_PARAMETER, f"past the max offset {SENT}"),
        (GROUP, TOPIC, 0, SENT + 1, RC.INVALID_PARAMETER, f"at most {SENT}"),
        (GROUP, TOPIC, 4, 0, RC.INVALID_PARAMETER, "out of range"),
        (GROUP, TOPIC, 2**31 - 1, 0, RC.INVALID_PARAMETER, "out of range"),
        (GROUP, TOPIC, -1, 0, RC.INVALID_PARAMETER, "must not be negative"),
        (GROUP, TOPIC, 0, -1, RC.INVALID_PARAMETER, "must not be negative"),
        (GROUP, "NoSuchCommitTopic", 0, 0, RC.TOPIC_NOT_EXIST, "Topic NoSuchCommitTopic not exist!"),
        ("g-never-seen", TOPIC, 0, 1, RC.SUBSCRIPTION_GROUP_NOT_EXIST, "Group g-never-seen not exist!"),
    ],
)
async def test_an_impossible_commit_is_refused_with_its_code_and_changes_nothing(
    queue, group, topic, queue_id, offset, code, remark_part
):
    ack = await queue.commit_offset(group, topic, queue_id, offset)
    assert (ack.code, remark_part in (ack.remark or "")) == (code, True), ack.remark
    assert await queue.query_offset(GROUP, TOPIC, 0) == (RC.SUCCESS, 2)
    table = fastjson.loads((await queue.request(RequestCode.GET_ALL_CONSUMER_OFFSET)).body_bytes())["offsetTable"]
    assert f"{topic}@{group}" not in table or (topic, group) == (TOPIC, GROUP)


async def test_the_max_offset_itself_and_a_rewind_are_accepted(queue):
    assert (await queue.commit_offset(GROUP, TOPIC, 0, SENT)).code == RC.SUCCESS
    assert await queue.query_offset(GROUP, TOPIC, 0) == (RC.SUCCESS, SENT)
    assert (await queue.commit_offset(GROUP, TOPIC, 0, 0)).code == RC.SUCCESS
    assert await queue.query_offset(GROUP, TOPIC, 0) == (RC.SUCCESS, 0)
    assert (await queue.commit_offset(GROUP, TOPIC, 3, 0)).code == RC.SUCCESS  # an empty queue: max offset 0


async def test_refused_oneway_commits_leave_one_rate_limited_line_and_nothing_stored(queue, master):
    before = master.output().count("refused a oneway request code 15")
    bad = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": str(2**63 - 1)}
    for _ in range(20):
        await queue.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, bad)
    await queue.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, {**bad, "queueId": "not-a-number"})
    assert await queue.query_offset(GROUP, TOPIC, 0) == (RC.SUCCESS, 2)  # answered after the oneways were served

    def lines() -> int:
        return master.output().count("refused a oneway request code 15") - before

    await async_wait_until(lines, 10, lambda: f"no refusal line in the broker log:\n{master.log_tail()}")
    assert lines() < 21, "every refused oneway commit logged a line: not rate-limited"
    assert "past the max offset" in master.output()


async def test_a_pulls_commit_offset_is_stored_only_when_possible_and_the_pull_is_answered(queue):
    async def pull_committing(commit_offset: int) -> RemotingCommand:
        header = PullHeader(
            consumer_group=GROUP,
            topic=TOPIC,
            queue_id=0,
            queue_offset=0,
            max_msg_nums=32,
            sys_flag=PULL_COMMIT_OFFSET | 0x4,
            commit_offset=commit_offset,
            subscription="*",
            expression_type="TAG",
        )
        return await queue.request(RequestCode.PULL_MESSAGE, header.to_ext())

    resp = await pull_committing(2**63 - 1)
    assert resp.code == RC.SUCCESS, resp.remark
    assert await queue.query_offset(GROUP, TOPIC, 0) == (RC.SUCCESS, 2)
    assert (await pull_committing(1)).code == RC.SUCCESS
    assert await queue.query_offset(GROUP, TOPIC, 0) == (RC.SUCCESS, 1)
