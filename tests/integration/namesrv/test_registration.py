"""Brokers register with a real nameserver process; clients read routes (spec §2.2, §2.5, §2.7)."""

from __future__ import annotations

import time

import pytest

from remoting.channel import aio_channel
from remoting.codes import ResponseCode
from remoting.pb import namesrv_pb2, namesrv_pb2_grpc
from tests.integration.namesrv.conftest import Names, register_request, route_addrs
from tests.support.procs import Namesrv

pytestmark = pytest.mark.integration


async def test_route_holds_master_and_slave_addresses_and_the_masters_queue_data(stub, names):
    master = await stub.RegisterBroker(register_request(names, topics=[names.topic]), timeout=5)
    slave = await stub.RegisterBroker(register_request(names, slave=True, topics=["OnlyOnSlave"]), timeout=5)
    assert (master.code, slave.code) == (0, 0), (master.remark, slave.remark)

    resp = await stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic=names.topic), timeout=5)
    assert resp.code == ResponseCode.SUCCESS
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in resp.route.queue_datas] == [
        (names.broker_name, 4, 4, 6)
    ]
    (broker_data,) = resp.route.broker_datas
    assert (broker_data.cluster, broker_data.broker_name) == (names.cluster, names.broker_name)
    assert dict(broker_data.broker_addrs) == {0: names.master_addr, 1: names.slave_addr}
    # A slave's topics never reach the route table.
    assert await route_addrs(stub, "OnlyOnSlave") is None


async def test_slave_learns_the_masters_ha_and_broker_address_once_the_master_registered(stub, names):
    before = await stub.RegisterBroker(register_request(names, slave=True), timeout=5)
    assert (before.code, before.ha_server_addr, before.master_addr) == (0, "", "")
    assert "no master" in before.remark

    await stub.RegisterBroker(register_request(names), timeout=5)
    after = await stub.RegisterBroker(register_request(names, slave=True), timeout=5)
    assert (after.code, after.ha_server_addr, after.master_addr) == (0, names.master_ha, names.master_addr)


async def test_unregister_removes_the_broker_and_finally_the_topic(stub, names):
    await stub.RegisterBroker(register_request(names, topics=[names.topic]), timeout=5)
    await stub.RegisterBroker(register_request(names, slave=True), timeout=5)

    def unregister(addr, broker_id):
        return namesrv_pb2.UnregisterBrokerRequest(
            cluster_name=names.cluster, broker_name=names.broker_name, broker_addr=addr, broker_id=broker_id
        )

    ack = await stub.UnregisterBroker(unregister(names.master_addr, 0), timeout=5)
    assert ack.code == 0 and "unregistered" in ack.remark
    assert await route_addrs(stub, names.topic) == {1: names.slave_addr}

    await stub.UnregisterBroker(unregister(names.slave_addr, 1), timeout=5)
    assert await route_addrs(stub, names.topic) is None
    info = await stub.GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
    assert names.broker_name not in info.broker_addr_table and names.cluster not in info.cluster_addr_table


async def test_unknown_topic_answers_topic_not_exist_with_what_to_do(stub):
    resp = await stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic="NoSuchTopic"), timeout=5)
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in resp.remark and "mqctl updateTopic" in resp.remark
    assert "autoCreateTopicEnable" in resp.remark


async def test_invalid_registration_is_refused_with_the_field_and_the_fix(stub, names):
    request = register_request(names)
    request.broker_addr = "no-port"
    resp = await stub.RegisterBroker(request, timeout=5)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert "broker_addr" in resp.remark and "listenPort" in resp.remark


async def test_cluster_info_lists_live_brokers_with_wall_clock_timestamps(stub, names):
    await stub.RegisterBroker(register_request(names, topics=[names.topic], counter=7), timeout=5)
    info = await stub.GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
    assert list(info.cluster_addr_table[names.cluster].broker_names) == [names.broker_name]
    (live,) = [b for b in info.live_brokers if b.broker_addr == names.master_addr]
    assert (live.broker_name, live.broker_id, live.ha_server_addr, live.data_version.counter) == (
        names.broker_name,
        0,
        names.master_ha,
        7,
    )
    assert abs(live.last_update_timestamp - time.time() * 1000) < 60_000
    topics = await stub.GetAllTopicList(namesrv_pb2.GetAllTopicListRequest(), timeout=5)
    assert names.topic in topics.topics


async def test_wipe_write_perm_and_delete_topic_change_the_route(stub, names):
    await stub.RegisterBroker(register_request(names, topics=[names.topic]), timeout=5)
    wiped = await stub.WipeWritePerm(namesrv_pb2.WipeWritePermRequest(broker_name=names.broker_name), timeout=5)
    assert (wiped.code, wiped.wiped_topic_count) == (0, 1)
    resp = await stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic=names.topic), timeout=5)
    assert resp.route.queue_datas[0].perm == 4

    ack = await stub.DeleteTopic(namesrv_pb2.DeleteTopicRequest(topic=names.topic), timeout=5)
    assert ack.code == 0
    assert await route_addrs(stub, names.topic) is None


async def test_two_nameservers_hold_registrations_independently(namesrv, stub, tmp_path):
    other = Namesrv(tmp_path / "ns2").start()
    channel = aio_channel(other.addr)
    try:
        other_stub = namesrv_pb2_grpc.NameServerStub(channel)
        a, b = Names(), Names()
        await stub.RegisterBroker(register_request(a, topics=[a.topic]), timeout=5)
        await other_stub.RegisterBroker(register_request(b, topics=[b.topic]), timeout=5)

        assert await route_addrs(stub, a.topic) == {0: a.master_addr}
        assert await route_addrs(other_stub, b.topic) == {0: b.master_addr}
        assert await route_addrs(stub, b.topic) is None
        assert await route_addrs(other_stub, a.topic) is None
    finally:
        await channel.close()
        assert other.stop() == 0
