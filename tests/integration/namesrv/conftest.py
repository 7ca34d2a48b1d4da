"""Fixtures for nameserver integration tests: a real ``python -m namesrv`` process and a gRPC client acting as
brokers and clients. Tests that share the module-scoped nameserver use unique broker names, addresses and topics
(``Names``), so they never see each other's registrations."""

from __future__ import annotations

import contextlib
import itertools

import pytest

from remoting.channel import aio_channel
from remoting.pb import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.support.procs import Namesrv

_unique = itertools.count(1)


class Names:
    """Fresh broker group identity: ``broker-N`` with a master and a slave address, and topic ``TopicN``."""

    def __init__(self) -> None:
        n = next(_unique)
        self.cluster = f"Cluster{n}"
        self.broker_name = f"broker-{n}"
        self.topic = f"Topic{n}"
        self.master_addr = f"10.1.{n}.1:10911"
        self.master_ha = f"10.1.{n}.1:10912"
        self.slave_addr = f"10.1.{n}.2:10911"
        self.slave_ha = f"10.1.{n}.2:10912"


def register_request(names: Names, *, slave: bool = False, topics=(), counter: int = 1, timeout_ms: int = 0):
    return namesrv_pb2.RegisterBrokerRequest(
        cluster_name=names.cluster,
        broker_name=names.broker_name,
        broker_addr=names.slave_addr if slave else names.master_addr,
        broker_id=1 if slave else 0,
        ha_server_addr=names.slave_ha if slave else names.master_ha,
        data_version=common_pb2.DataVersion(timestamp=1_700_000_000_000, counter=counter),
        topic_configs=[
            common_pb2.TopicConfig(topic_name=t, read_queue_nums=4, write_queue_nums=4, perm=6) for t in topics
        ],
        heartbeat_timeout_millis=timeout_ms,
        broker_permission=6,
    )


async def route_addrs(stub, topic: str) -> dict[int, str] | None:
    """The brokerAddrs of the topic's route (one group), or None when the topic has no route."""
    resp = await stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=5)
    if resp.code != 0:
        return None
    return {bid: addr for bd in resp.route.broker_datas for bid, addr in bd.broker_addrs.items()}


async def route_is(stub, topic: str, expected: dict[int, str] | None) -> bool:
    return await route_addrs(stub, topic) == expected


@contextlib.asynccontextmanager
async def keepalive_stream(namesrv_addr: str, broker_addr: str):
    """An open KeepAlive stream on its own channel, after the first answer (kept as ``call.first_response``)."""
    channel = aio_channel(namesrv_addr)
    call = namesrv_pb2_grpc.NameServerStub(channel).KeepAlive()
    try:
        await call.write(namesrv_pb2.KeepAliveRequest(broker_addr=broker_addr))
        call.first_response = await call.read()
        yield call
    finally:
        call.cancel()
        await channel.close()


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    ns = Namesrv(tmp_path_factory.mktemp("namesrv")).start()
    yield ns
    ns.stop()


@pytest.fixture
async def stub(namesrv):
    channel = aio_channel(namesrv.addr)
    yield namesrv_pb2_grpc.NameServerStub(channel)
    await channel.close()


@pytest.fixture
def names() -> Names:
    return Names()
