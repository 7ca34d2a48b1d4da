"""The SDK's remoting connection against real processes: many sends and pulls in flight on one connection with
answers matched by opaque, a held pull that does not delay the requests behind it, timeouts, a broker crash and
restart, close()."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from client.errors import BrokerUnreachableError, RequestTimeout
from remoting.message_codec import decode_records
from client.rpc import ClientRemoting, command
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from remoting.message_headers import PULL_SUBSCRIPTION, PULL_SUSPEND, PullHeader, SendHeader
from tests.integration.client.conftest import create_topic, unique, wait_for
from harness.procs import Broker

pytestmark = pytest.mark.integration


@pytest.fixture
async def remoting():
    r = ClientRemoting()
    yield r
    await r.close()


def send_cmd(topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    header = SendHeader(
        producer_group=unique("PG_x"),
        topic=topic,
        queue_id=queue_id,
    )
    return command(RequestCode.SEND_MESSAGE_V2, header.to_v2(), body)


async def wait_held(admin, addr: str, count: int = 1) -> None:
    """Until the broker reports ``count`` pulls parked by long polling (its runtime info's heldPullRequests)."""

    async def held() -> bool:
        return int((await admin.broker_runtime_info(addr))["heldPullRequests"]) == count

    await wait_for(held, 5.0, f"{count} pull(s) held by the broker at {addr}")


def pull_cmd(group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32, suspend_ms: int = 0):
    header = PullHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms else 0),
        suspend_timeout_millis=suspend_ms,
        subscription="*",
        expression_type="TAG",
    )
    return command(RequestCode.PULL_MESSAGE, header.to_ext())


def bodies(resp: RemotingCommand) -> list[bytes]:
    return [r.body for r in decode_records(resp.body_bytes())]


async def test_concurrent_sends_and_pulls_on_one_connection_each_get_their_own_answer(broker, admin, remoting):
    topic, group = unique("T_conn_many"), unique("G_conn_many")
    await create_topic(admin, broker, topic, queues=4)
    payloads = [f"m-{i:03d}".encode() for i in range(200)]
    await remoting.invoke(broker.addr, command(RequestCode.HEART_BEAT, None, b'{"clientID":"x@1"}'), 5.0)
    conn = remoting.client.cached(broker.addr)
    # 200 sends to 4 queues, all in flight on one connection at once.
    results = await asyncio.wait_for(
        asyncio.gather(
            *(remoting.invoke(broker.addr, send_cmd(topic, i % 4, b), 10.0) for i, b in enumerate(payloads))
        ),
        30,
    )
    assert remoting.client.cached(broker.addr) is conn, "the sends did not share one connection"
    by_queue: dict[int, dict[int, bytes]] = defaultdict(dict)
    for i, (body, resp) in enumerate(zip(payloads, results, strict=True)):
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        queue_id, offset = int(resp.ext["queueId"]), int(resp.ext["queueOffset"])
        assert queue_id == i % 4, f"answer of send {i} belongs to queue {queue_id}"
        assert len(resp.ext["msgId"]) == 32
        assert offset not in by_queue[queue_id], "two sends answered with the same offset"
        by_queue[queue_id][offset] = body
    for qid in range(4):
        assert sorted(by_queue[qid]) == list(range(50)), f"queue {qid} offsets not contiguous"

    # Concurrent pulls on the same connection: 5 pulls of 10 per queue, 20 in flight at once.
    pulls = [(qid, off) for qid in range(4) for off in range(0, 50, 10)]
    answers = await asyncio.wait_for(
        asyncio.gather(
            *(remoting.invoke(broker.addr, pull_cmd(group, topic, q, off, max_nums=10), 10.0) for q, off in pulls)
        ),
        30,
    )
    pulled: dict[int, dict[int, bytes]] = defaultdict(dict)
    for (qid, off), resp in zip(pulls, answers, strict=True):
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        records = decode_records(resp.body_bytes())
        assert len(records) == 10
        assert int(resp.ext["nextBeginOffset"]) == off + 10
        for r in records:
            assert r.topic == topic and r.queue_id == qid
            pulled[qid][r.queue_offset] = r.body
        assert [r.queue_offset for r in records] == list(range(off, off + 10))
    assert dict(pulled) == dict(by_queue)
    assert sorted(b for q in pulled.values() for b in q.values()) == payloads


async def test_a_held_pull_does_not_delay_a_send_on_the_same_connection(broker, admin, remoting):
    topic, group = unique("T_conn_hold"), unique("G_conn_hold")
    await create_topic(admin, broker, topic, queues=1)
    held = asyncio.ensure_future(remoting.invoke(broker.addr, pull_cmd(group, topic, 0, 0, suspend_ms=5000), 10.0))
    try:
        await wait_held(admin, broker.addr)
        assert not held.done(), "the pull at the max offset was answered instead of held"
        sent = await asyncio.wait_for(remoting.invoke(broker.addr, send_cmd(topic, 0, b"wake-up"), 5.0), 5.0)
        assert sent.code == ResponseCode.SUCCESS and sent.ext["queueOffset"] == "0"
        resp = await asyncio.wait_for(held, 4.0)  # woken by the arrival, well before its 5 s suspension
    finally:
        held.cancel()
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert bodies(resp) == [b"wake-up"]
    assert resp.ext["nextBeginOffset"] == "1"


async def test_an_unknown_request_code_is_answered_with_3_and_the_connection_goes_on(broker, admin, remoting):
    topic = unique("T_conn_unknown")
    await create_topic(admin, broker, topic, queues=1)
    await remoting.invoke(broker.addr, send_cmd(topic, 0, b"before"), 5.0)
    conn = remoting.client.cached(broker.addr)
    answer = await asyncio.wait_for(remoting.invoke(broker.addr, command(9999), 5.0), 5.0)
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert answer.remark and "9999" in answer.remark
    sent = await asyncio.wait_for(remoting.invoke(broker.addr, send_cmd(topic, 0, b"after"), 5.0), 5.0)
    assert sent.code == ResponseCode.SUCCESS and sent.ext["queueOffset"] == "1"
    assert remoting.client.cached(broker.addr) is conn, "the connection was reopened after the unknown code"


async def test_a_call_timeout_raises_request_timeout_and_the_client_goes_on(broker, admin, remoting):
    topic, group = unique("T_conn_timeout"), unique("G_conn_timeout")
    await create_topic(admin, broker, topic, queues=1)
    await remoting.invoke(broker.addr, send_cmd(topic, 0, b"warm-up"), 5.0)  # connected: time only the timeout
    with pytest.raises(RequestTimeout) as err:
        await asyncio.wait_for(remoting.invoke(broker.addr, pull_cmd(group, topic, 0, 1, suspend_ms=3000), 0.3), 5.0)
    assert err.value.addr == broker.addr and "PULL_MESSAGE" in str(err.value)
    assert not remoting.health.healthy(broker.addr)  # a failed call marks the address for a few seconds
    sent = await asyncio.wait_for(remoting.invoke(broker.addr, send_cmd(topic, 0, b"later"), 5.0), 5.0)
    assert sent.code == ResponseCode.SUCCESS and sent.ext["queueOffset"] == "1"
    assert remoting.health.healthy(broker.addr)  # ...and an answer clears the mark
    resp = await asyncio.wait_for(remoting.invoke(broker.addr, pull_cmd(group, topic, 0, 0), 5.0), 5.0)
    assert bodies(resp) == [b"warm-up", b"later"]


async def test_a_broker_crash_fails_the_held_pull_and_the_same_client_works_after_restart(tmp_path, namesrv, admin):
    broker = Broker(tmp_path / "b", name=unique("broker-conn"), namesrv_addr=namesrv.addr).start()
    remoting = ClientRemoting()
    try:
        topic, group = unique("T_conn_crash"), unique("G_conn_crash")
        await create_topic(admin, broker, topic, queues=1)
        sent = await remoting.invoke(broker.addr, send_cmd(topic, 0, b"before-crash"), 5.0)
        assert sent.code == ResponseCode.SUCCESS
        held = asyncio.ensure_future(remoting.invoke(broker.addr, pull_cmd(group, topic, 0, 1, suspend_ms=8000), 10.0))
        await wait_held(admin, broker.addr)
        assert not held.done()
        broker.kill()
        with pytest.raises(BrokerUnreachableError) as err:
            await asyncio.wait_for(held, 5.0)  # the closed connection fails it at once, not after 10 s
        assert err.value.addr == broker.addr

        broker.start()

        async def send_after_restart():
            try:
                return await remoting.invoke(broker.addr, send_cmd(topic, 0, b"after-restart"), 2.0)
            except (BrokerUnreachableError, RequestTimeout):
                return None

        resp = await wait_for(send_after_restart, 20, "a send on the same client after the restart", interval_s=0.2)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext["queueOffset"] == "1", "the restarted broker lost the message stored before the crash"
        pulled = await remoting.invoke(broker.addr, pull_cmd(group, topic, 0, 0), 5.0)
        assert bodies(pulled) == [b"before-crash", b"after-restart"]
    finally:
        await remoting.close()
        broker.stop()


async def test_close_fails_a_held_pull_at_once_and_takes_no_more_calls(broker, admin):
    topic, group = unique("T_conn_close"), unique("G_conn_close")
    await create_topic(admin, broker, topic, queues=1)
    remoting = ClientRemoting()
    held = asyncio.ensure_future(remoting.invoke(broker.addr, pull_cmd(group, topic, 0, 0, suspend_ms=5000), 10.0))
    await wait_held(admin, broker.addr)
    assert not held.done()
    await asyncio.wait_for(remoting.close(), 2.0)
    with pytest.raises(BrokerUnreachableError):
        await asyncio.wait_for(held, 2.0)
    with pytest.raises(BrokerUnreachableError):  # a closed client takes no more calls
        await remoting.invoke(broker.addr, send_cmd(topic, 0, b"x"), 1.0)
