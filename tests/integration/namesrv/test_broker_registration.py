"""The broker's registration client (broker/registration.py) in this process against a real nameserver process:
what a broker registers, what a slave learns, how it follows the connection, and its clean stop. (The tests with a
whole broker process are in tests/integration/broker/test_registration.py.)"""

from __future__ import annotations

import pytest

from broker.config import load_broker_settings
from broker.metadata.topics import TopicConfig, TopicConfigManager
from broker.registration import RegistrationService
from remoting import fastjson
from tests.integration.namesrv.conftest import route, route_addrs
from harness.procs import Namesrv, free_port, write_conf
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration


class Learned:
    def __init__(self) -> None:
        self.results: list[tuple[str, str]] = []

    def __call__(self, ha_server_addr: str, master_addr: str) -> None:
        self.results.append((ha_server_addr, master_addr))


def make_service(tmp_path, namesrv_addr: str, *, name="broker-r", broker_id=0, role="ASYNC_MASTER",
                 topics=(), **conf):
    port = free_port()
    values = {
        "brokerClusterName": "RegCluster", "brokerName": name, "brokerId": broker_id, "brokerRole": role,
        "namesrvAddr": namesrv_addr, "brokerIP1": "127.0.0.1", "listenPort": port, "haListenPort": port + 1,
        "storePathRootDir": str(tmp_path / f"store-{broker_id}"), **conf,
    }
    settings = load_broker_settings(write_conf(tmp_path / f"{name}-{broker_id}.conf", values), environ={})
    manager = TopicConfigManager(tmp_path / f"config-{broker_id}")
    for topic in topics:
        manager.update(TopicConfig(topic, 3, 3))
    learned = Learned()
    return RegistrationService(settings, manager, learned), learned, settings


@pytest.fixture
async def stopped_later():
    services = []
    yield services.append
    for service in services:
        await service.stop()
        await service.close()


async def test_a_master_registers_its_topics_and_a_clean_stop_unregisters_it(namesrv, client, tmp_path,
                                                                            stopped_later):
    service, learned, settings = make_service(tmp_path, namesrv.addr, name="broker-r1", topics=["RegTopic1"])
    await service.start()
    stopped_later(service)
    assert service.settled and learned.results == [("", "")]
    data = fastjson.loads((await route(client, namesrv.addr, "RegTopic1")).body_bytes())
    assert data["queueDatas"] == [
        {"brokerName": "broker-r1", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0, "writeQueueNums": 3}
    ]
    assert data["brokerDatas"][0]["brokerAddrs"] == {"0": settings.broker.broker_addr}

    await service.stop()
    assert await route_addrs(client, namesrv.addr, "RegTopic1") is None
    assert f"unregistered broker-r1 id 0 at {settings.broker.broker_addr}" in namesrv.output()


async def test_a_new_topic_is_routed_at_once_by_register_now(namesrv, client, tmp_path, stopped_later):
    service, _, _ = make_service(tmp_path, namesrv.addr, name="broker-r2")
    await service.start()
    stopped_later(service)
    service.topics.update(TopicConfig("RegTopic2", 2, 2))
    service.register_now()
    await async_wait_until(lambda: route_addrs(client, namesrv.addr, "RegTopic2"), 5, "RegTopic2 never routed")


async def test_a_read_only_broker_advertises_its_topics_read_only(namesrv, client, tmp_path, stopped_later):
    service, _, _ = make_service(tmp_path, namesrv.addr, name="broker-r3", topics=["RegTopic3"], brokerPermission=4)
    await service.start()
    stopped_later(service)
    data = fastjson.loads((await route(client, namesrv.addr, "RegTopic3")).body_bytes())
    assert data["queueDatas"][0]["perm"] == 4


async def test_a_slave_learns_its_masters_ha_and_broker_address_from_the_reply(namesrv, tmp_path, stopped_later):
    slave, learned, _ = make_service(tmp_path, namesrv.addr, name="broker-r4", broker_id=1, role="SLAVE")
    await slave.start()
    stopped_later(slave)
    assert learned.results == [("", "")] and not slave.settled  # no master yet: the next round comes sooner

    master, _, master_settings = make_service(tmp_path, namesrv.addr, name="broker-r4", topics=["RegTopic4"])
    await master.start()
    stopped_later(master)
    await async_wait_until(lambda: slave.settled, 10, f"the slave never learned its master: {learned.results}")
    assert learned.results[-1] == (master_settings.ha_server_addr, master_settings.broker.broker_addr)


async def test_the_connection_stays_open_between_rounds_and_a_restarted_nameserver_relearns_the_broker_at_once(
    tmp_path, client, stopped_later
):
    ns = Namesrv(tmp_path / "ns").start()
    try:
        service, _, _ = make_service(tmp_path, ns.addr, name="broker-r5", topics=["RegTopic5"])
        await service.start()
        stopped_later(service)
        conn = service.client.cached(ns.addr)
        assert conn is not None and conn.is_open, "the registration connection must stay open (liveness)"
        ns.stop()
        ns.start()  # same port, empty route table; the next periodic round is 30 s away
        await async_wait_until(lambda: route_addrs(client, ns.addr, "RegTopic5"), 10,
                               lambda: f"the broker did not re-register after the nameserver restart:\n{ns.log_tail()}")
    finally:
        ns.stop()


async def test_every_nameserver_gets_the_registration(namesrv, client, tmp_path, stopped_later):
    other = Namesrv(tmp_path / "ns2").start()
    try:
        service, _, _ = make_service(tmp_path, f"{namesrv.addr};{other.addr}", name="broker-r6", topics=["RegTopic6"])
        await service.start()
        stopped_later(service)
        assert service.settled
        for addr in (namesrv.addr, other.addr):
            assert await route_addrs(client, addr, "RegTopic6")
    finally:
        other.stop()


async def test_an_unreachable_nameserver_leaves_the_round_unsettled_but_the_others_registered(namesrv, client, tmp_path,
                                                                                          stopped_later):
    dead = f"127.0.0.1:{free_port()}"
    service, learned, _ = make_service(tmp_path, f"{dead};{namesrv.addr}", name="broker-r7", topics=["RegTopic7"])
    await service.start()
    stopped_later(service)
    assert learned.results == [("", "")] and not service.settled
    assert await route_addrs(client, namesrv.addr, "RegTopic7")
