"""remoting.topic_route: the one TopicRouteData reader (issue 22 item 13). It reads what the nameserver writes in
both JSON dialects, refuses the same bad bodies for every caller (the SDK's route, the broker's v2 route), and
bounds what a body may make a caller allocate."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.grpc_v2.cluster import RouteUnknown, Share, parse_route
from client.errors import MQClientError
from client.namesrv import NamesrvClient
from client.route_cache import build_route
from connectors.spark.broker_client import SyncClient
from connectors.spark.errors import BrokerRefusal
from namesrv import bodies
from namesrv import route_table as rt
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import response_to
from remoting.server import RemotingServer
from remoting.topic_route import (
    MAX_ENTRIES,
    MAX_ROUTE_QUEUES,
    BrokerData,
    QueueData,
    RouteDataError,
    TopicRouteData,
    read_topic_route,
)


def _written(standard: bool, order: str | None = None) -> bytes:
    route = rt.TopicRouteData(
        [rt.QueueData("b", 4, 2, 6, 0), rt.QueueData("a", 8, 8, 7, 3)],
        [rt.BrokerData("C", "a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),
         rt.BrokerData("C", "b", {1: "[::1]:10911"})],
    )
    return bodies.dumps(bodies.route_json(route, order), standard=standard)


@pytest.mark.parametrize("standard", [True, False], ids=["standard-json", "fastjson-bare-keys"])
def test_it_reads_what_the_nameserver_writes(standard):
    data = read_topic_route(_written(standard, "a:8"))
    assert data == TopicRouteData(
        (QueueData("b", 4, 2, 6, 0), QueueData("a", 8, 8, 7, 3)),
        (BrokerData("a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}, "C"), BrokerData("b", {1: "[::1]:10911"}, "C")),
        "a:8",
    )
    assert read_topic_route(fastjson.dumps(data.to_json())) == read_topic_route(data.to_json()) == data


def test_absent_or_null_arrays_and_numbers_are_empty_and_zero():
    assert read_topic_route(b"{}") == TopicRouteData()
    assert read_topic_route(b'{"queueDatas":null,"brokerDatas":[{"brokerName":"a"}]}') == TopicRouteData(
        (), (BrokerData("a", {}, ""),))
    assert read_topic_route(b'{"queueDatas":[{"brokerName":"a"}]}').queue_datas == (QueueData("a"),)


BAD = {
    "not an object": b"[]",
    "not JSON": b"{",
    "queueDatas not an array": b'{"queueDatas":{}}',
    "queueData not an object": b'{"queueDatas":[1]}',
    "no brokerName": b'{"queueDatas":[{"perm":6}]}',
    "empty brokerName": b'{"brokerDatas":[{"brokerName":""}]}',
    "brokerName not a string": b'{"queueDatas":[{"brokerName":7}]}',
    "unicode digit": '{"queueDatas":[{"brokerName":"a","readQueueNums":"\u00b2"}]}'.encode(),
    "fraction": b'{"queueDatas":[{"brokerName":"a","writeQueueNums":1.5}]}',
    "negative": b'{"queueDatas":[{"brokerName":"a","writeQueueNums":-1}]}',
    "too many queues": b'{"queueDatas":[{"brokerName":"a","readQueueNums":65536}]}',
    "perm too big": b'{"queueDatas":[{"brokerName":"a","perm":256}]}',
    "brokerId not a number": b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":{"x":"h:1"}}]}',
    "address not host:port": b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":{"0":"h"}}]}',
    "address not a string": b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":{"0":1}}]}',
    "brokerAddrs an array": b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":["h:1"]}]}',
    "cluster not a string": b'{"brokerDatas":[{"brokerName":"a","cluster":1}]}',
    "orderTopicConf not a string": b'{"orderTopicConf":1}',
}


@pytest.mark.parametrize("body", BAD.values(), ids=BAD.keys())
def test_every_caller_refuses_the_same_bad_bodies(body):
    with pytest.raises(RouteDataError, match="TopicRouteData"):
        read_topic_route(body)
    with pytest.raises(RouteUnknown, match="not a TopicRouteData"):
        parse_route(body, "t")


def test_a_body_cannot_make_a_caller_build_more_than_the_bounded_number_of_queues():
    groups = MAX_ROUTE_QUEUES // 65535 + 1
    qds = [{"brokerName": f"b{i}", "readQueueNums": 65535, "writeQueueNums": 1, "perm": 6} for i in range(groups)]
    with pytest.raises(RouteDataError, match=f"more than {MAX_ROUTE_QUEUES}"):
        build_route("T", qds, [])
    too_many = [{"brokerName": f"b{i}"} for i in range(MAX_ENTRIES + 1)]
    with pytest.raises(RouteDataError, match=f"more than {MAX_ENTRIES}"):
        read_topic_route({"brokerDatas": too_many})


def test_the_broker_v2_route_and_the_sdk_route_read_one_body_alike():
    body = _written(False)
    assert parse_route(body, "t") == [Share("b", "", 4, 2, 6), Share("a", "10.0.0.1:10911", 8, 8, 7)]
    route = build_route("T", fastjson.loads(body)["queueDatas"], fastjson.loads(body)["brokerDatas"])
    assert [q.broker_name for q in route.publish_queues] == ["a"] * 8  # b has no master
    assert len(route.subscribe_queues) == 12


@given(st.lists(st.tuples(st.integers(0, 70000), st.integers(0, 70000), st.integers(0, 300)), max_size=4))
def test_numbers_are_taken_exactly_when_within_bounds(nums):
    qds = [{"brokerName": f"b{i}", "readQueueNums": r, "writeQueueNums": w, "perm": p}
           for i, (r, w, p) in enumerate(nums)]
    ok = all(r <= 65535 and w <= 65535 and p <= 255 for r, w, p in nums)
    if ok:
        got = read_topic_route({"queueDatas": qds}).queue_datas
        assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in got] == nums
    else:
        with pytest.raises(RouteDataError):
            read_topic_route({"queueDatas": qds})


async def _serve_route(body: bytes):
    server = RemotingServer("fake-namesrv", "127.0.0.1", 0)
    server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                    lambda conn, request: response_to(request, ResponseCode.SUCCESS, body=body))
    return server, f"127.0.0.1:{await server.start()}"


ROUTE_WITH_BAD_PERM = (b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:1"},"brokerName":"b","cluster":"C"}],'
                       b'"queueDatas":[{"brokerName":"b","perm":256,"readQueueNums":4,"writeQueueNums":4}]}')


async def test_the_sdk_and_the_spark_connector_refuse_a_route_their_own_readers_used_to_take():
    server, addr = await _serve_route(ROUTE_WITH_BAD_PERM)
    ns = NamesrvClient(addr, timeout_s=2.0)
    try:
        with pytest.raises(MQClientError, match=r"route of T from .*queueDatas\[0\]\.perm=256"):
            await ns.topic_route_data("T")
        sync = SyncClient(addr, timeout_s=2.0)
        try:
            with pytest.raises(BrokerRefusal, match=r"unreadable route body: .*perm=256"):
                await asyncio.to_thread(sync.route, "T")
        finally:
            sync.close()
    finally:
        await ns.close()
        await server.stop(0.1)
    with pytest.raises(RouteUnknown, match="perm=256"):
        parse_route(ROUTE_WITH_BAD_PERM, "T")
