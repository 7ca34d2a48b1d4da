"""broker.grpc_v2.cluster: the nameserver's route and each master's grpcServerPort become the v2 route's owners
(parsing, the local share, groups left out with the reason, a dead broker's failure cached)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.grpc_v2.cluster import (
    ClusterRoutes,
    RouteUnknown,
    Share,
    endpoints,
    merge_own,
    parse_grpc_port,
    parse_route,
)
from broker.grpc_v2.pb import definition_pb2 as pb
from remoting.codes import RequestCode, ResponseCode
from remoting.errors import RemotingTimeoutError
from remoting.frame_codec import RemotingCommand

# fastjson writes brokerAddrs keys bare; a group whose master is down lists its slave only
ROUTE = (b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"a","cluster":"C"},'
         b'{"brokerAddrs":{1:"10.0.0.4:10911"},"brokerName":"b","cluster":"C"},'
         b'{"brokerAddrs":{"0":"10.0.0.5:10911"},"brokerName":"c","cluster":"C"}],'
         b'"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},'
         b'{"brokerName":"b","perm":6,"readQueueNums":2,"writeQueueNums":2},'
         b'{"brokerName":"c","perm":4,"readQueueNums":8,"writeQueueNums":0}]}')


def test_parse_route_gives_one_share_per_group_with_its_master_or_none():
    assert parse_route(ROUTE, "t") == [Share("a", "10.0.0.1:10911", 4, 4, 6), Share("b", "", 2, 2, 6),
                                       Share("c", "10.0.0.5:10911", 8, 0, 4)]


@pytest.mark.parametrize("body", [b"[]", b"{", b'{"queueDatas":[{"perm":6}]}',
                                  b'{"queueDatas":[{"brokerName":"a","readQueueNums":"\xc2\xb2"}]}'])
def test_a_route_that_is_not_a_topic_route_data_is_route_unknown(body):
    with pytest.raises(RouteUnknown, match="not a TopicRouteData"):
        parse_route(body, "t")


def test_grpc_port_from_broker_config_properties():
    assert parse_grpc_port(b"brokerName=a\ngrpcServerPort=8083\n", "x:1") == 8083
    assert parse_grpc_port(b"grpcServerPort=0\n", "x:1") == 0
    with pytest.raises(RouteUnknown, match="no grpcServerPort"):
        parse_grpc_port(b"brokerName=a\n", "x:1")
    with pytest.raises(RouteUnknown, match="cannot be read"):
        parse_grpc_port(b"grpcServerPort=70000\n", "x:1")


def test_own_share_replaces_the_nameservers_copy():
    shares = [Share("a", "h:1", 4, 4, 6), Share("b", "h:2", 2, 2, 6)]
    assert merge_own(shares, Share("a", "h:1", 8, 8, 6)) == [Share("b", "h:2", 2, 2, 6), Share("a", "h:1", 8, 8, 6)]
    assert merge_own(shares, None) == shares


def test_endpoint_scheme_follows_the_host():
    assert endpoints("127.0.0.1", 8081).scheme == pb.AddressScheme.IPv4
    assert endpoints("::1", 8081).scheme == pb.AddressScheme.IPv6
    assert endpoints("broker-a.example", 8081).scheme == pb.AddressScheme.DOMAIN_NAME


class FakeRemoting:
    """Answers GET_ROUTEINFO_BY_TOPIC with ROUTE and GET_BROKER_CONFIG per address; counts the calls."""

    def __init__(self, ports: dict[str, int | None]) -> None:
        self.ports = ports
        self.calls: list[tuple[str, int]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.calls.append((addr, cmd.code))
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return RemotingCommand(ResponseCode.SUCCESS, body=ROUTE)
        port = self.ports[addr]
        if port is None:
            raise RemotingTimeoutError(addr, timeout_s, "GET_BROKER_CONFIG")
        return RemotingCommand(ResponseCode.SUCCESS, body=f"grpcServerPort={port}\n".encode())


def _ctx(topics: dict) -> SimpleNamespace:
    broker = SimpleNamespace(broker_permission=6, broker_addr="10.0.0.9:10911", namesrv_list=["ns:9876"])
    return SimpleNamespace(is_slave=False, broker_name="d", settings=SimpleNamespace(broker=broker),
                           topics=SimpleNamespace(get=topics.get))


async def test_owners_name_each_master_endpoint_and_say_why_groups_are_left_out():
    remote = FakeRemoting({"10.0.0.1:10911": 8082, "10.0.0.5:10911": None})
    cfg = SimpleNamespace(perm=6, read_queue_nums=1, write_queue_nums=1)
    routes = ClusterRoutes(_ctx({"t": cfg}), client=remote)
    routes.grpc_port = 8089
    owners, left_out = await routes.owners("t")
    assert [(o.share.broker_name, o.host, o.grpc_port) for o in owners] == [("a", "10.0.0.1", 8082),
                                                                           ("d", "10.0.0.9", 8089)]
    assert sorted(r.split(":")[0] for r in left_out) == ["b", "c"]
    assert any("no master" in r for r in left_out) and any("did not answer" in r for r in left_out)
    # a second answer within the TTLs asks nobody again: not the nameserver, not the dead broker
    before = len(remote.calls)
    await routes.owners("t")
    assert len(remote.calls) == before
