"""A commitlog offset named by a request is read only where a whole message record starts (issue 12 item 8).

VIEW_MESSAGE_BY_ID (33) and CONSUMER_SEND_MSG_BACK (36) take a physical offset from the caller. Inside a record,
inside a body that holds record-shaped bytes, at the blank record that ends a file, past the end or before the
start, each gets a specific code (29, or 22 for a deleted file) and a remark, never SUCCESS with raw bytes, and a
send-back stores nothing.
"""

from __future__ import annotations

import pytest

from remoting.codes import RequestCode
from remoting.codes import ResponseCode as RC
from remoting.message_codec import HEADER_SIZE, decode, host_bytes
from tests.stored_records import stored_record
from tests.integration.broker.rpc import message

pytestmark = pytest.mark.integration

TOPIC = "ReadByOffsetT"
GROUP = "g-read-by-offset"


def inner_record(physical_offset: int) -> bytes:
    """A well-formed record (magic, sizes, CRC) that a producer can put inside a message body."""
    return stored_record(
        topic_bytes=b"Forged", physical_offset=physical_offset, born_timestamp=1, born_host=host_bytes("1.2.3.4", 5),
        store_timestamp=1, store_host=host_bytes("1.2.3.4", 6), body=b"not yours",
    )


async def max_phy_offset(client) -> int:
    return int((await client.runtime_info())["commitLogMaxOffset"])


async def retry_backlog(client) -> int:
    resp = await client.request(RequestCode.GET_MAX_OFFSET, {"topic": f"%RETRY%{GROUP}", "queueId": "0"})
    return int(resp.ext["offset"])


@pytest.fixture
async def offsets(client):
    """(the offset of a plain message, the bad offsets to try with the reason each is bad)."""
    plain = await client.send(TOPIC, 0, [message(b"a plain message")])
    carrier = await client.send(TOPIC, 0, [message(inner_record(physical_offset=0))])
    assert plain.code == carrier.code == RC.SUCCESS
    end = await max_phy_offset(client)
    bad = {
        "one byte in": plain.physical_offset + 1,
        "two bytes in": plain.physical_offset + 2,
        "at the body": plain.physical_offset + HEADER_SIZE,
        "a record-shaped body": carrier.physical_offset + HEADER_SIZE,
        "the end": end,
        "past the end": 2**62,
        "negative": -1,
    }
    return plain.physical_offset, bad


async def test_view_message_answers_only_a_record_start(client, offsets):
    good, bad = offsets
    ok = await client.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(good)})
    assert ok.code == RC.SUCCESS and decode(ok.body_bytes(), check_crc=True).body == b"a plain message"
    for why, offset in bad.items():
        resp = await client.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
        assert (resp.code, resp.body_bytes()) == (RC.INVALID_PARAMETER, b""), (why, resp.code, resp.remark)
        assert "can not find message by the offset" in resp.remark and str(offset) in resp.remark, resp.remark


async def test_send_back_refuses_an_offset_that_is_not_a_record_start_and_stores_nothing(client, offsets):
    good, bad = offsets
    await client.heartbeat("c-read-by-offset", consumers={GROUP: {TOPIC: "*"}})
    for why, offset in bad.items():
        resp = await client.send_back(GROUP, offset, origin_topic=TOPIC)
        assert resp.code == RC.INVALID_PARAMETER, (why, resp.code, resp.remark)
        assert "can not find message by the offset" in (resp.remark or ""), resp.remark
    assert await retry_backlog(client) == 0
    ok = await client.send_back(GROUP, good, origin_topic=TOPIC)
    assert ok.code == RC.SUCCESS, ok.remark


async def queue_backlog(client, topic: str) -> int:
    """Messages in queue 0 of ``topic`` (0 when the topic does not exist)."""
    resp = await client.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
    return int(resp.ext["offset"]) if resp.code == RC.SUCCESS else 0


@pytest.fixture
async def counterfeit(client):
    """(a genuine message's offset, the offset a counterfeit record inside a later body claims and starts at).

    The producer predicts where its body lands (the commitlog end + the 88-byte header) and writes a record for
    exactly that offset, the topic and queue it sends to and the queue offset its carrier gets, with a valid CRC
    (issue 22 item 6): everything a record carries about itself agrees, only the commitlog's chain disagrees."""
    genuine = await client.send(TOPIC, 0, [message(b"the genuine one")])
    assert genuine.code == RC.SUCCESS
    end = await max_phy_offset(client)
    claimed = end + HEADER_SIZE
    fake = stored_record(
        topic_bytes=TOPIC.encode(), queue_id=0, queue_offset=genuine.queue_offset + 1, physical_offset=claimed,
        born_timestamp=1, born_host=host_bytes("1.2.3.4", 5), store_timestamp=1, store_host=host_bytes("1.2.3.4", 6),
        body=b"counterfeit",
    )
    carrier = await client.send(TOPIC, 0, [message(fake)])
    assert carrier.code == RC.SUCCESS and carrier.physical_offset == end, "another message landed in between"
    return genuine.physical_offset, claimed


async def test_view_message_refuses_a_counterfeit_record_at_the_offset_it_claims(client, counterfeit):
    genuine, claimed = counterfeit
    resp = await client.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(claimed)})
    assert (resp.code, resp.body_bytes()) == (RC.INVALID_PARAMETER, b""), (resp.code, resp.remark)
    assert "can not find message by the offset" in resp.remark and "index has no message" in resp.remark
    ok = await client.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(genuine)})
    assert ok.code == RC.SUCCESS and decode(ok.body_bytes(), check_crc=True).body == b"the genuine one"


async def test_send_back_copies_no_counterfeit_record_to_the_dlq(client, counterfeit):
    genuine, claimed = counterfeit
    dlq = f"%DLQ%{GROUP}"
    await client.heartbeat("c-read-by-offset", consumers={GROUP: {TOPIC: "*"}})
    before = await queue_backlog(client, dlq)
    for delay_level in (-1, 0):
        resp = await client.send_back(GROUP, claimed, delay_level=delay_level, origin_topic=TOPIC)
        assert resp.code == RC.INVALID_PARAMETER, (delay_level, resp.code, resp.remark)
        assert "can not find message by the offset" in (resp.remark or ""), resp.remark
    assert await queue_backlog(client, dlq) == before
    ok = await client.send_back(GROUP, genuine, delay_level=-1, origin_topic=TOPIC)
    assert ok.code == RC.SUCCESS, ok.remark
    assert await queue_backlog(client, dlq) == before + 1
