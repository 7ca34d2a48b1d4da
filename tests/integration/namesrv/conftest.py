"""Fixtures for nameserver integration tests: raw remoting peers that register like a broker does (REGISTER_BROKER
with a RegisterBrokerBody, over one connection kept open) or ask like a client, against the real ``python -m namesrv``
process of tests/integration/conftest.py. Tests that share the module-scoped nameserver use unique broker names,
addresses and topics (``Names``), so they never see each other's registrations."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from remoting import fastjson
from remoting.client import RemotingClient
from remoting.codes import CURRENT_VERSION, RequestCode
from remoting.frame_codec import RemotingCommand


_unique = itertools.count(1)
TIMEOUT_S = 5.0


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


def topic_config(topic: str, queues: int = 4, perm: int = 6) -> dict[str, Any]:
    """A TopicConfig as a 4.9.7 Java broker writes it."""
    return {"order": False, "perm": perm, "readQueueNums": queues, "topicFilterType": "SINGLE_TAG",
            "topicName": topic, "topicSysFlag": 0, "writeQueueNums": queues}


def register_body(topics=(), counter: int = 1) -> bytes:
    return fastjson.dumps({
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": 1_700_000_000_000},
            "topicConfigTable": {t: topic_config(t) for t in topics},
        },
    })


def register_command(names: Names, *, slave: bool = False, topics=(), counter: int = 1, timeout_ms: int = 0,
                     body: bytes | None = None, **ext: str) -> RemotingCommand:
    header = {
        "brokerName": names.broker_name,
        "brokerAddr": names.slave_addr if slave else names.master_addr,
        "clusterName": names.cluster,
        "haServerAddr": names.slave_ha if slave else names.master_ha,
        "brokerId": "1" if slave else "0",
        "compressed": "false",
        "bodyCrc32": "0",
    }
    if timeout_ms:
        header["heartbeatTimeoutMillis"] = str(timeout_ms)
    header.update(ext)
    return RemotingCommand(RequestCode.REGISTER_BROKER, ext=header,
                           body=register_body(topics, counter) if body is None else body)


async def register(client: RemotingClient, addr: str, names: Names, **kwargs) -> RemotingCommand:
    return await client.invoke(addr, register_command(names, **kwargs), TIMEOUT_S)


async def request(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None,
                  body: bytes = b"", version: int = CURRENT_VERSION) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand(code, ext=ext, body=body, version=version), TIMEOUT_S)


async def route(client: RemotingClient, addr: str, topic: str, version: int = CURRENT_VERSION, **ext: str):
    return await request(client, addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, **ext}, version=version)


async def route_addrs(client: RemotingClient, addr: str, topic: str) -> dict[int, str] | None:
    """The brokerAddrs of the topic's route (one group), or None when the topic has no route."""
    resp = await route(client, addr, topic)
    if resp.code != 0:
        return None
    data = fastjson.loads(resp.body_bytes())
    return {int(bid): a for bd in data["brokerDatas"] for bid, a in bd["brokerAddrs"].items()}


async def route_is(client: RemotingClient, addr: str, topic: str, expected: dict[int, str] | None) -> bool:
    return await route_addrs(client, addr, topic) == expected


async def cluster_info(client: RemotingClient, addr: str) -> dict[str, Any]:
    resp = await request(client, addr, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert resp.code == 0, resp.remark
    return fastjson.loads(resp.body_bytes())


@pytest.fixture
async def client():
    """A client's connection (asks routes, admin); brokers get their own ``RemotingClient`` each."""
    c = RemotingClient(name="test-client")
    yield c
    await c.close()


@pytest.fixture
def names() -> Names:
    return Names()
