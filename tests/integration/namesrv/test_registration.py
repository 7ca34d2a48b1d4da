"""Brokers register with a real nameserver process over remoting; clients read routes and cluster info
(spec remoting.md §2.1, §5.3-§5.5; rocketmq-replication.md §2.2, §2.5, §2.7)."""

from __future__ import annotations

import time

import pytest

from namesrv.bodies import body_crc32, encode_register_body_compressed
from namesrv.route_table import DataVersion, TopicConfig
from remoting import fastjson
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.integration.namesrv.conftest import (
    Names,
    cluster_info,
    register,
    register_body,
    request,
    route,
    route_addrs,
)
from harness.procs import Namesrv

pytestmark = pytest.mark.integration


async def test_route_holds_master_and_slave_addresses_and_the_masters_queue_data(namesrv, client, names):
    master = await register(client, namesrv.addr, names, topics=[names.topic])
    slave = await register(client, namesrv.addr, names, slave=True, topics=["OnlyOnSlave"])
    assert (master.code, slave.code) == (0, 0), (master.remark, slave.remark)

    resp = await route(client, namesrv.addr, names.topic)
    assert resp.code == ResponseCode.SUCCESS
    data = fastjson.loads(resp.body_bytes())
    assert data["queueDatas"] == [
        {"brokerName": names.broker_name, "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
    ]
    assert data["brokerDatas"] == [{
        "brokerAddrs": {"0": names.master_addr, "1": names.slave_addr},
        "brokerName": names.broker_name,
        "cluster": names.cluster,
        "enableActingMaster": False,
    }]
    assert data["filterServerTable"] == {} and "orderTopicConf" not in data
    # A slave's topics never reach the route table.
    assert await route_addrs(client, namesrv.addr, "OnlyOnSlave") is None


async def test_route_body_form_follows_the_callers_version(namesrv, client, names):
    await register(client, namesrv.addr, names, topics=[names.topic])
    await register(client, namesrv.addr, names, slave=True)
    quoted = f'"brokerAddrs":{{"0":"{names.master_addr}","1":"{names.slave_addr}"}}'.encode()
    bare = f'"brokerAddrs":{{0:"{names.master_addr}",1:"{names.slave_addr}"}}'.encode()
    for version, ext, form in ((407, {}, quoted), (401, {}, quoted), (317, {}, bare), (63, {}, bare),
                               (317, {"acceptStandardJsonOnly": "true"}, quoted)):
        resp = await route(client, namesrv.addr, names.topic, version=version, **ext)
        assert form in resp.body_bytes(), (version, ext, resp.body_bytes())


async def test_slave_learns_the_masters_ha_and_broker_address_once_the_master_registered(namesrv, client, names):
    before = await register(client, namesrv.addr, names, slave=True)
    assert before.code == 0 and not (before.ext or {}).get("masterAddr")
    assert "no master" in before.remark

    await register(client, namesrv.addr, names)
    after = await register(client, namesrv.addr, names, slave=True)
    assert after.code == 0
    assert (after.ext["haServerAddr"], after.ext["masterAddr"]) == (names.master_ha, names.master_addr)


async def test_queue_data_changes_only_with_a_new_data_version(namesrv, client, names):
    async def write_queues() -> int:
        data = fastjson.loads((await route(client, namesrv.addr, names.topic)).body_bytes())
        return data["queueDatas"][0]["writeQueueNums"]

    body = fastjson.loads(register_body([names.topic], counter=1))
    await register(client, namesrv.addr, names, topics=[names.topic], counter=1)
    body["topicConfigSerializeWrapper"]["topicConfigTable"][names.topic]["writeQueueNums"] = 8
    await register(client, namesrv.addr, names, body=fastjson.dumps(body))
    assert await write_queues() == 4
    body["topicConfigSerializeWrapper"]["dataVersion"]["counter"] = 2
    await register(client, namesrv.addr, names, body=fastjson.dumps(body))
    assert await write_queues() == 8


async def test_unregister_removes_the_broker_and_finally_the_topic(namesrv, client, names):
    await register(client, namesrv.addr, names, topics=[names.topic])
    await register(client, namesrv.addr, names, slave=True)

    async def unregister(addr: str, broker_id: int):
        return await request(client, namesrv.addr, RequestCode.UNREGISTER_BROKER, {
            "clusterName": names.cluster, "brokerName": names.broker_name, "brokerAddr": addr,
            "brokerId": str(broker_id),
        })

    ack = await unregister(names.master_addr, 0)
    assert ack.code == 0 and "unregistered" in ack.remark
    assert await route_addrs(client, namesrv.addr, names.topic) == {1: names.slave_addr}

    await unregister(names.slave_addr, 1)
    assert await route_addrs(client, namesrv.addr, names.topic) is None
    info = await cluster_info(client, namesrv.addr)
    assert names.broker_name not in info["brokerAddrTable"] and names.cluster not in info["clusterAddrTable"]


async def test_unknown_topic_answers_topic_not_exist_with_what_to_do(namesrv, client):
    resp = await route(client, namesrv.addr, "NoSuchTopic")
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert "No topic route info in name server for the topic: NoSuchTopic" in resp.remark
    assert "mqctl updateTopic" in resp.remark and "autoCreateTopicEnable" in resp.remark


async def test_cluster_info_lists_groups_clusters_and_live_brokers_with_wall_clock_timestamps(namesrv, client, names):
    await register(client, namesrv.addr, names, topics=[names.topic], counter=7)
    await register(client, namesrv.addr, names, slave=True)
    info = await cluster_info(client, namesrv.addr)
    assert info["clusterAddrTable"][names.cluster] == [names.broker_name]
    assert info["brokerAddrTable"][names.broker_name] == {
        "brokerAddrs": {"0": names.master_addr, "1": names.slave_addr},
        "brokerName": names.broker_name,
        "cluster": names.cluster,
        "enableActingMaster": False,
    }
    live = info["brokerLiveTable"][names.master_addr]
    assert live["haServerAddr"] == names.master_ha and live["dataVersion"]["counter"] == 7
    assert abs(live["lastUpdateTimestamp"] - time.time() * 1000) < 60_000
    assert info["brokerLiveTable"][names.slave_addr]["haServerAddr"] == names.slave_ha
    # an old caller gets fastjson's bare ids, as from a Java namesrv
    old = await request(client, namesrv.addr, RequestCode.GET_BROKER_CLUSTER_INFO, version=317)
    assert f'{{0:"{names.master_addr}",1:"{names.slave_addr}"}}'.encode() in old.body_bytes()


async def test_topic_lists_all_and_by_cluster(namesrv, client, names):
    other = Names()
    await register(client, namesrv.addr, names, topics=[names.topic, "Shared"])
    await register(client, namesrv.addr, other, topics=[other.topic, "Shared"])
    resp = await request(client, namesrv.addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert {names.topic, other.topic, "Shared"} <= set(fastjson.loads(resp.body_bytes())["topicList"])
    resp = await request(client, namesrv.addr, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": names.cluster})
    assert sorted(fastjson.loads(resp.body_bytes())["topicList"]) == sorted([names.topic, "Shared"])


async def test_wipe_and_add_write_perm_and_delete_topic_change_the_route(namesrv, client, names):
    await register(client, namesrv.addr, names, topics=[names.topic])

    async def perm() -> int:
        return fastjson.loads((await route(client, namesrv.addr, names.topic)).body_bytes())["queueDatas"][0]["perm"]

    wiped = await request(client, namesrv.addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                          {"brokerName": names.broker_name})
    assert (wiped.code, wiped.ext["wipeTopicCount"]) == (0, "1")
    assert await perm() == 4
    added = await request(client, namesrv.addr, RequestCode.ADD_WRITE_PERM_OF_BROKER,
                          {"brokerName": names.broker_name})
    assert (added.code, added.ext["addTopicCount"]) == (0, "1")
    assert await perm() == 6

    ack = await request(client, namesrv.addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": names.topic})
    assert ack.code == 0
    assert await route_addrs(client, namesrv.addr, names.topic) is None


async def test_query_data_version_says_changed_and_refreshes_an_unchanged_broker(namesrv, client, names):
    await register(client, namesrv.addr, names, counter=3)
    header = {"clusterName": names.cluster, "brokerName": names.broker_name, "brokerAddr": names.master_addr,
              "brokerId": "0"}
    same = await request(client, namesrv.addr, RequestCode.QUERY_DATA_VERSION, header,
                         body=b'{"counter":3,"timestamp":1700000000000}')
    assert (same.code, same.ext["changed"]) == (0, "false")
    assert fastjson.loads(same.body_bytes())["counter"] == 3
    newer = await request(client, namesrv.addr, RequestCode.QUERY_DATA_VERSION, header,
                          body=b'{"counter":4,"timestamp":1700000000000}')
    assert (newer.code, newer.ext["changed"]) == (0, "true")


async def test_a_compressed_registration_as_java_brokers_send_it_is_accepted(namesrv, client, names):
    body = encode_register_body_compressed(DataVersion(1, 1), [TopicConfig(names.topic, 2, 2, 6)])
    resp = await register(client, namesrv.addr, names, body=body, compressed="true", bodyCrc32=str(body_crc32(body)))
    assert resp.code == 0, resp.remark
    data = fastjson.loads((await route(client, namesrv.addr, names.topic)).body_bytes())
    assert data["queueDatas"][0]["writeQueueNums"] == 2


async def test_two_nameservers_hold_registrations_independently(namesrv, client, tmp_path):
    other = Namesrv(tmp_path / "ns2").start()
    try:
        a, b = Names(), Names()
        await register(client, namesrv.addr, a, topics=[a.topic])
        await register(client, other.addr, b, topics=[b.topic])

        assert await route_addrs(client, namesrv.addr, a.topic) == {0: a.master_addr}
        assert await route_addrs(client, other.addr, b.topic) == {0: b.master_addr}
        assert await route_addrs(client, namesrv.addr, b.topic) is None
        assert await route_addrs(client, other.addr, a.topic) is None
    finally:
        await client.close()
        assert other.stop() == 0


async def test_a_broker_registered_from_another_connection_is_not_touched_when_a_client_disconnects(namesrv, names):
    broker, reader = RemotingClient(name="broker"), RemotingClient(name="reader")
    try:
        await register(broker, namesrv.addr, names, topics=[names.topic])
        assert await route_addrs(reader, namesrv.addr, names.topic) == {0: names.master_addr}
        await reader.close()
        reader = RemotingClient(name="reader2")
        assert await route_addrs(reader, namesrv.addr, names.topic) == {0: names.master_addr}
    finally:
        await broker.close()
        await reader.close()
