"""What the SDK puts on the wire, checked against a RemotingServer fake that plays nameserver and broker on one
port and records every request. Pure protocol shape only (header keys, request codes, bodies, how answers map
to results); behaviour against real processes is in tests/integration/client/."""

from __future__ import annotations

import asyncio

import pytest

from client import Message, NoNameserverError, NoRouteError, Producer, SendStatus
from broker.controller_mode.fence import fenced_remark
from client.heartbeat import consumer_data, heartbeat_body, subscription_data
from client.namesrv import NamesrvClient
from client.rpc import ClientRemoting, command
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to
from remoting.message_codec import decode_batch, java_string_hash, string_to_properties
from remoting.server import RemotingServer
from harness.procs import free_port
from harness.waiting import async_wait_until
from tests.unit.client.fake_cluster import FakeCluster


async def test_concurrent_sends_travel_as_one_320_whose_body_is_the_codecs_batch():
    async with FakeCluster() as fake:
        fake.topics["T"] = 1
        async with Producer("PG", fake.addr, dedup=True) as producer:
            msgs = [Message("T", f"m{i}".encode(), tags="TagA", keys=["k", str(i)]) for i in range(10)]
            results = await asyncio.gather(*(producer.send(m) for m in msgs))
    [req] = fake.of(RequestCode.SEND_BATCH_MESSAGE)
    ext = req.ext
    assert (ext["a"], ext["b"], ext["c"], ext["e"], ext["m"], ext["n"]) == ("PG", "T", "TBW102", "0", "true", "b")
    assert ext["dedup"] == "true"  # pyrmq's extension field, for the Spark sink's exactly-once writes
    assert "WAIT" not in ext["i"]  # WAIT=true is the broker's default
    entries = decode_batch(req.body, 100, 1 << 20, properties_as_dict=True)
    assert [body for _, body, _ in entries] == [m.body for m in msgs]
    props = [p for _, _, p in entries]
    assert [p["UNIQ_KEY"] for p in props] == [r.msg_id for r in results] == [m.msg_id for m in msgs]
    assert {p["TAGS"] for p in props} == {"TagA"} and props[3]["KEYS"] == "k 3"
    assert [r.queue_offset for r in results] == list(range(10))
    assert [r.offset_msg_id[-2:] for r in results] == [f"{i:02X}" for i in range(10)]
    assert all(r.status is SendStatus.SEND_OK for r in results)


async def test_a_lone_message_goes_as_310_with_its_properties_and_wait_in_the_header():
    async with FakeCluster() as fake:
        fake.topics["T"] = 1
        async with Producer("PG", fake.addr) as producer:
            result = await producer.send(Message("T", b"solo", properties={"a": "b"}, wait_store_msg_ok=False))
    [req] = fake.of(RequestCode.SEND_MESSAGE_V2)
    assert req.body == b"solo" and req.ext["m"] == "false" and "dedup" not in req.ext
    props = string_to_properties(req.ext["i"])
    assert props == {"a": "b", "UNIQ_KEY": result.msg_id, "WAIT": "false"}


async def test_a_delayed_message_is_never_batched_and_messages_differing_in_wait_split():
    async with FakeCluster() as fake:
        fake.topics["T"] = 1
        async with Producer("PG", fake.addr) as producer:
            await asyncio.gather(
                producer.send(Message("T", b"a")),
                producer.send(Message("T", b"later", delay_level=3)),
                producer.send(Message("T", b"b")),
                producer.send(Message("T", b"c", wait_store_msg_ok=False)),
                producer.send(Message("T", b"d", wait_store_msg_ok=False)),
            )
    singles = fake.of(RequestCode.SEND_MESSAGE_V2)
    batches = fake.of(RequestCode.SEND_BATCH_MESSAGE)
    delayed = [r for r in singles if r.body == b"later"]
    assert len(delayed) == 1 and string_to_properties(delayed[0].ext["i"])["DELAY"] == "3"
    no_wait = [r for r in batches if "WAIT\x01false" in r.ext["i"]]
    assert [[b for _, b, _ in decode_batch(r.body, 10, 100)] for r in no_wait] == [[b"c", b"d"]]
    every = [r.body for r in singles] + [b for r in batches for _, b, _ in decode_batch(r.body, 10, 100)]
    assert sorted(every) == [b"a", b"b", b"c", b"d", b"later"]


@pytest.mark.parametrize(
    ("code", "status"),
    [(12, SendStatus.FLUSH_SLAVE_TIMEOUT), (11, SendStatus.SLAVE_NOT_AVAILABLE), (10, SendStatus.FLUSH_DISK_TIMEOUT)],
)
async def test_weak_store_codes_surface_as_send_statuses_and_are_not_retried(code, status):
    async with FakeCluster() as fake:
        fake.topics["T"] = 1
        fake.send_code = lambda _req: code
        async with Producer("PG", fake.addr) as producer:
            result = await producer.send(Message("T", b"x"))
            stats = producer.stats
    assert result.status is status
    assert stats.rpcs == 1 and stats.retries == 0


async def test_rocketmq_retry_codes_are_retried_and_other_refusals_are_not():
    async with FakeCluster() as fake:
        fake.topics["T"] = 2
        codes = iter([ResponseCode.SYSTEM_ERROR, ResponseCode.SUCCESS])
        fake.send_code = lambda _req: next(codes)
        async with Producer("PG", fake.addr) as producer:
            ok = await producer.send(Message("T", b"x"))
            fake.send_code = lambda _req: ResponseCode.MESSAGE_ILLEGAL
            with pytest.raises(Exception) as info:
                await producer.send(Message("T", b"y"))
            stats = producer.stats
    assert ok.status is SendStatus.SEND_OK
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL and "refused by the fake" in str(info.value)
    assert stats.retries == 1 and stats.rpcs == 3
    first, second = fake.of(RequestCode.SEND_MESSAGE_V2)[:2]
    assert first.ext["e"] != second.ext["e"]  # the retry went to another queue


async def test_an_unknown_topic_borrows_the_tbw102_route_capped_at_default_topic_queue_nums():
    async with FakeCluster() as fake:
        fake.topics["TBW102"] = 8
        async with Producer("PG", fake.addr, default_topic_queue_nums=3) as producer:
            results = [await producer.send(Message("NEW", f"{i}".encode())) for i in range(9)]
    routes = [r.ext["topic"] for r in fake.of(RequestCode.GET_ROUTEINFO_BY_TOPIC)]
    assert routes[:2] == ["NEW", "TBW102"]
    assert sorted({r.message_queue.queue_id for r in results}) == [0, 1, 2]
    assert {r.ext["d"] for r in fake.of(RequestCode.SEND_MESSAGE_V2)} == {"3"}


async def test_the_producer_heartbeats_its_group_and_unregisters_at_stop():
    async with FakeCluster() as fake:
        fake.topics["T"] = 1
        async with Producer("PG", fake.addr) as producer:
            await producer.send(Message("T", b"x"))
            client_id = producer.client_id
            await async_wait_until(lambda: fake.of(RequestCode.HEART_BEAT), 10, "the producer's heartbeat")
    [beat] = fake.of(RequestCode.HEART_BEAT)
    assert fastjson.loads(beat.body) == {
        "clientID": client_id,
        "consumerDataSet": [],
        "producerDataSet": [{"groupName": "PG"}],
    }
    [bye] = fake.of(RequestCode.UNREGISTER_CLIENT)
    assert bye.ext == {"clientID": client_id, "producerGroup": "PG"}


def test_heartbeat_data_carries_tags_and_their_java_hash_codes():
    sub = subscription_data("T", "B || A", 42)
    assert sub == {
        "classFilterMode": False,
        "codeSet": [java_string_hash("A"), java_string_hash("B")],
        "expressionType": "TAG",
        "subString": "B || A",
        "subVersion": 42,
        "tagsSet": ["A", "B"],
        "topic": "T",
    }
    assert java_string_hash("A") == 65
    every = subscription_data("T", "*", 1)
    assert (every["subString"], every["tagsSet"], every["codeSet"]) == ("*", [], [])
    data = consumer_data(
        "G",
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        subscriptions=[sub],
    )
    body = fastjson.loads(heartbeat_body("1.2.3.4@5#6", consumers=[data]))
    assert body["clientID"] == "1.2.3.4@5#6" and body["producerDataSet"] == []
    assert body["consumerDataSet"][0]["groupName"] == "G"
    assert body["consumerDataSet"][0]["subscriptionDataSet"] == [sub]


async def test_routes_parse_fastjson_bare_keys_and_17_is_no_route():
    async with FakeCluster() as fake:
        fake.topics["T"] = 2
        ns = NamesrvClient(f"127.0.0.1:{free_port()};{fake.addr}", timeout_s=1.0)
        try:
            data = await ns.topic_route_data("T")
            with pytest.raises(NoRouteError):
                await ns.topic_route_data("NOPE")
            info = await ns.cluster_info()
        finally:
            await ns.close()
    assert data.broker_datas[0].broker_addrs == {0: fake.addr}
    assert info["brokerAddrTable"]["b"]["brokerAddrs"] == {0: fake.addr}
    assert info["clusterAddrTable"] == {"C": ["b"]}
    assert ns.current == fake.addr  # the dead first nameserver was skipped and the live one kept


async def test_no_nameserver_answering_names_them_all():
    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    ns = NamesrvClient(";".join(dead), timeout_s=0.5)
    try:
        with pytest.raises(NoNameserverError) as info:
            await ns.topic_route_data("T")
    finally:
        await ns.close()
    assert all(a in str(info.value) for a in dead) and info.value.retriable


async def test_many_requests_in_flight_on_one_connection_get_their_own_answers_in_any_order():
    """The property the old Exchange stream gave: one connection, many requests at once, answers matched by
    opaque. The fake answers in reverse arrival order; every caller still gets the answer to its request."""
    server = RemotingServer("fake", "127.0.0.1", 0)
    arrived: list[asyncio.Future] = []
    all_in = asyncio.Event()

    async def echo_later(conn, request: RemotingCommand) -> RemotingCommand:
        fut = asyncio.get_running_loop().create_future()
        arrived.append(fut)
        if len(arrived) == 50:
            all_in.set()
        await fut
        return response_to(request, ResponseCode.SUCCESS, ext={"echo": request.ext["n"]})

    server.register(999, echo_later)
    addr = f"127.0.0.1:{await server.start()}"
    remoting = ClientRemoting()
    try:
        calls = [asyncio.ensure_future(remoting.invoke(addr, command(999, {"n": str(i)}), 5.0)) for i in range(50)]
        await asyncio.wait_for(all_in.wait(), 5.0)
        assert len(server.connections) == 1
        for fut in reversed(arrived):
            fut.set_result(None)
            await asyncio.sleep(0)
        answers = await asyncio.gather(*calls)
    finally:
        await remoting.close()
        await server.stop(0.1)
    assert [a.ext["echo"] for a in answers] == [str(i) for i in range(50)]


@pytest.mark.parametrize("fenced", [True, False])
async def test_a_fenced_masters_answer_refreshes_the_route_at_once_and_a_plain_weak_answer_does_not(fenced):
    async with FakeCluster() as fake:
        fake.topics["T"] = 1
        fake.send_code = lambda _req: ResponseCode.SLAVE_NOT_AVAILABLE
        fake.send_remark = fenced_remark("another master was elected") if fenced else "slave not available"
        async with Producer("PG", fake.addr) as producer:
            producer.routes.min_refresh_interval_s = 0.0  # the first route read was moments ago
            result = await producer.send(Message("T", b"x"))
            if fenced:
                await async_wait_until(lambda: producer.routes.stats.on_demand == 1, 10, "an on-demand route refresh")
            else:
                assert producer.routes.stats.on_demand == 0
            stats = producer.stats
    assert result.status is SendStatus.SLAVE_NOT_AVAILABLE  # stored: reported as it is, never retried
    assert stats.rpcs == 1 and stats.retries == 0
