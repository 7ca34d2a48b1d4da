"""The Exchange stream against real processes: many sends and pulls multiplexed on one stream, a held pull that
does not block the requests behind it, an unknown request kind, timeouts, a broker crash and restart, close()."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import grpc
import pytest

from client.errors import BrokerError
from client.exchange import ExchangeClient
from client.records import decode_records
from client.rpc import BrokerChannels
from remoting.codes import ResponseCode
from remoting.pb import broker_pb2
from tests.integration.client.conftest import create_topic, unique, wait_for
from tests.support.procs import Broker

pytestmark = pytest.mark.integration

FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
HOLD_FLAGS = FLAG_SUSPEND | FLAG_SUBSCRIPTION


@pytest.fixture
async def channels():
    c = BrokerChannels()
    yield c
    await c.close()


def send_envelope(topic: str, queue_id: int, *bodies: bytes, **props: str) -> broker_pb2.ExchangeRequest:
    now = int(time.time() * 1000)
    return broker_pb2.ExchangeRequest(
        send=broker_pb2.SendMessageRequest(
            producer_group=unique("PG_x"),
            topic=topic,
            queue_id=queue_id,
            born_host="127.0.0.1:12345",
            messages=[broker_pb2.Message(body=b, properties=dict(props), born_timestamp=now) for b in bodies],
        )
    )


def pull_envelope(
    group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32, suspend_ms: int = 0
) -> broker_pb2.ExchangeRequest:
    return broker_pb2.ExchangeRequest(
        pull=broker_pb2.PullMessageRequest(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=HOLD_FLAGS if suspend_ms else FLAG_SUBSCRIPTION,
            suspend_timeout_millis=suspend_ms,
            subscription="*",
        )
    )


async def wait_pending(ex: ExchangeClient, n: int = 1) -> None:
    """Until ``n`` requests wait on the client's current stream (i.e. were queued on it)."""
    await wait_for(lambda: ex._stream is not None and len(ex._stream.pending) >= n, 5.0, f"{n} pending request(s)")


async def test_concurrent_sends_and_pulls_each_get_their_own_answer(broker, admin, channels):
    topic, group = unique("T_ex_many"), unique("G_ex_many")
    await create_topic(admin, broker, topic, queues=4)
    ex = channels.get(broker.addr).exchange
    bodies = [f"m-{i:03d}".encode() for i in range(200)]
    # 200 sends to 4 queues, all in flight on one stream at once.
    results = await asyncio.wait_for(
        asyncio.gather(*(ex.call(send_envelope(topic, i % 4, body), 10.0) for i, body in enumerate(bodies))), 30
    )
    by_queue: dict[int, dict[int, bytes]] = defaultdict(dict)
    for i, (body, resp) in enumerate(zip(bodies, results, strict=True)):
        assert isinstance(resp, broker_pb2.SendMessageResponse)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.queue_id == i % 4, f"answer of send {i} belongs to queue {resp.queue_id}"
        assert len(resp.msg_ids) == 1
        assert resp.queue_offset not in by_queue[resp.queue_id], "two sends answered with the same offset"
        by_queue[resp.queue_id][resp.queue_offset] = body
    for qid in range(4):
        assert sorted(by_queue[qid]) == list(range(50)), f"queue {qid} offsets not contiguous"

    # Concurrent pulls on the same stream: 5 pulls of 10 per queue, 20 in flight at once.
    pulls = [(qid, off) for qid in range(4) for off in range(0, 50, 10)]
    answers = await asyncio.wait_for(
        asyncio.gather(*(ex.call(pull_envelope(group, topic, q, off, max_nums=10), 10.0) for q, off in pulls)), 30
    )
    pulled: dict[int, dict[int, bytes]] = defaultdict(dict)
    for (qid, off), resp in zip(pulls, answers, strict=True):
        assert isinstance(resp, broker_pb2.PullMessageResponse)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        records = decode_records(resp.records)
        assert resp.message_count == len(records) == 10
        assert resp.next_begin_offset == off + 10
        for r in records:
            assert r.topic == topic and r.queue_id == qid
            pulled[qid][r.queue_offset] = r.body
        assert [r.queue_offset for r in records] == list(range(off, off + 10))
    assert dict(pulled) == dict(by_queue)
    assert sorted(b for q in pulled.values() for b in q.values()) == bodies


async def test_a_held_pull_does_not_delay_a_send_on_the_same_stream(broker, admin, channels):
    topic, group = unique("T_ex_hold"), unique("G_ex_hold")
    await create_topic(admin, broker, topic, queues=1)
    ex = channels.get(broker.addr).exchange
    t0 = time.monotonic()
    held = asyncio.ensure_future(ex.call(pull_envelope(group, topic, 0, 0, suspend_ms=3000), 10.0))
    try:
        await asyncio.sleep(0.3)
        assert not held.done(), "the pull at the max offset was answered instead of held"
        sent = await asyncio.wait_for(ex.call(send_envelope(topic, 0, b"wake-up"), 5.0), 5.0)
        assert sent.code == ResponseCode.SUCCESS and sent.queue_offset == 0
        assert not held.done(), "the send was answered only after the held pull"
        assert time.monotonic() - t0 < 2.0, "the send waited for the hold"
        resp = await asyncio.wait_for(held, 2.0)
        assert time.monotonic() - t0 < 2.5, "the held pull was not woken by the send"
    finally:
        held.cancel()
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    records = decode_records(resp.records)
    assert [r.body for r in records] == [b"wake-up"]
    assert resp.next_begin_offset == 1


async def test_an_envelope_without_a_kind_gets_code_3_in_band_on_the_wire(broker, admin, channels):
    """The broker's side, below ExchangeClient.call: the raw answer carries code 3, a remark, no response."""
    topic = unique("T_ex_unknown_raw")
    await create_topic(admin, broker, topic, queues=1)
    ex = channels.get(broker.addr).exchange
    answer = await asyncio.wait_for(ex._call(broker_pb2.ExchangeRequest(opaque=7), 5.0), 5.0)
    assert isinstance(answer, broker_pb2.ExchangeResponse)
    assert answer.WhichOneof("response") is None
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert "send and pull" in answer.remark
    stream = ex._stream
    sent = await asyncio.wait_for(ex.call(send_envelope(topic, 0, b"after"), 5.0), 5.0)
    assert sent.code == ResponseCode.SUCCESS and sent.queue_offset == 0
    assert ex._stream is stream, "the stream was reopened after the unknown kind"


async def test_an_unknown_request_kind_is_answered_in_band_and_the_stream_goes_on(broker, admin, channels):
    topic = unique("T_ex_unknown")
    await create_topic(admin, broker, topic, queues=1)
    ex = channels.get(broker.addr).exchange
    await ex.call(send_envelope(topic, 0, b"before"), 5.0)  # open the stream
    stream = ex._stream
    with pytest.raises(BrokerError) as err:
        await asyncio.wait_for(ex.call(broker_pb2.ExchangeRequest(opaque=7), 5.0), 5.0)
    assert err.value.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert "send and pull" in err.value.remark
    sent = await asyncio.wait_for(ex.call(send_envelope(topic, 0, b"after"), 5.0), 5.0)
    assert sent.code == ResponseCode.SUCCESS and sent.queue_offset == 1
    assert ex._stream is stream, "the stream was reopened after the unknown kind"


async def test_a_call_timeout_fails_with_deadline_exceeded_and_the_client_goes_on(broker, admin, channels):
    topic, group = unique("T_ex_timeout"), unique("G_ex_timeout")
    await create_topic(admin, broker, topic, queues=1)
    ex = channels.get(broker.addr).exchange
    await ex.call(send_envelope(topic, 0, b"warm-up"), 5.0)  # the stream is open: time only the timeout
    t0 = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(ex.call(pull_envelope(group, topic, 0, 1, suspend_ms=3000), 0.3), 5.0)
    elapsed = time.monotonic() - t0
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.25 <= elapsed < 1.5, elapsed
    sent = await asyncio.wait_for(ex.call(send_envelope(topic, 0, b"later"), 5.0), 5.0)
    assert sent.code == ResponseCode.SUCCESS and sent.queue_offset == 1
    resp = await asyncio.wait_for(ex.call(pull_envelope(group, topic, 0, 0), 5.0), 5.0)
    assert [r.body for r in decode_records(resp.records)] == [b"warm-up", b"later"]


async def test_a_broker_crash_fails_the_held_pull_and_the_same_client_works_after_restart(tmp_path, namesrv, admin):
    broker = Broker(tmp_path / "b", name=unique("broker-ex"), namesrv_addr=namesrv.addr).start()
    channels = BrokerChannels()
    try:
        topic, group = unique("T_ex_crash"), unique("G_ex_crash")
        await create_topic(admin, broker, topic, queues=1)
        ex = channels.get(broker.addr).exchange
        sent = await ex.call(send_envelope(topic, 0, b"before-crash"), 5.0)
        assert sent.code == ResponseCode.SUCCESS
        held = asyncio.ensure_future(ex.call(pull_envelope(group, topic, 0, 1, suspend_ms=8000), 10.0))
        await asyncio.sleep(0.3)
        assert not held.done()
        t0 = time.monotonic()
        broker.kill()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(held, 8.0)
        elapsed = time.monotonic() - t0
        assert err.value.code() != grpc.StatusCode.DEADLINE_EXCEEDED, err.value
        assert elapsed < 5.0, f"the broken stream was noticed only after {elapsed:.1f}s"

        broker.start()

        async def send_after_restart():
            try:
                return await ex.call(send_envelope(topic, 0, b"after-restart"), 2.0)
            except grpc.aio.AioRpcError:
                return None

        resp = await wait_for(send_after_restart, 20, "a send on the same client after the restart", interval_s=0.2)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.queue_offset == 1, "the restarted broker lost the message stored before the crash"
        pulled = await ex.call(pull_envelope(group, topic, 0, 0), 5.0)
        assert [r.body for r in decode_records(pulled.records)] == [b"before-crash", b"after-restart"]
    finally:
        await channels.close()
        broker.stop()


async def test_close_fails_a_held_pull_with_cancelled(broker, admin, channels):
    topic, group = unique("T_ex_close"), unique("G_ex_close")
    await create_topic(admin, broker, topic, queues=1)
    ex = ExchangeClient(channels.get(broker.addr).messaging, broker.addr)
    held = asyncio.ensure_future(ex.call(pull_envelope(group, topic, 0, 0, suspend_ms=3000), 10.0))
    await wait_pending(ex)
    await asyncio.sleep(0.2)
    assert not held.done()
    t0 = time.monotonic()
    await asyncio.wait_for(ex.close(), 2.0)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(held, 2.0)
    assert err.value.code() == grpc.StatusCode.CANCELLED
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(grpc.aio.AioRpcError) as err:  # a closed client takes no more calls
        await ex.call(send_envelope(topic, 0, b"x"), 1.0)
    assert err.value.code() == grpc.StatusCode.CANCELLED
