"""The admin request codes against a real broker over remoting: topics, groups, metadata tables, stats, runtime
info, config, HA status, connections, and finding messages by key or offset."""

from __future__ import annotations

import asyncio
import time

import pytest

from client.errors import BrokerError
from harness.waiting import async_wait_until
from remoting import fastjson
from remoting.codes import RequestCode
from remoting.codes import ResponseCode as RC
from remoting.message_codec import decode, iter_records
from tests.integration.broker.rpc import BrokerClient, group_config, message

pytestmark = pytest.mark.integration


def body(resp) -> dict:
    return fastjson.loads(resp.body_bytes())


async def test_a_disabled_group_is_refused_pulls_until_it_is_enabled_again(client, admin, master):
    await client.create_topic("GroupTopic", queues=1)
    assert (await client.create_group(group_config("g-admin", consumeEnable=False))).code == 0
    assert (await client.pull("g-admin", "GroupTopic", 0, 0)).code == RC.NO_PERMISSION
    assert (await client.create_group(group_config("g-admin"))).code == 0
    assert (await client.pull("g-admin", "GroupTopic", 0, 0)).code == RC.PULL_NOT_FOUND
    before = await admin.all_subscription_groups(master.addr)
    assert "g-admin" in {g.group_name for g in before.groups}
    resp = await client.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g-admin"})
    assert resp.code == 0, resp.remark
    after = await admin.all_subscription_groups(master.addr)
    assert "g-admin" not in {g.group_name for g in after.groups}
    assert after.data_version.counter > before.data_version.counter
    again = await client.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g-admin"})
    assert again.code == 0 and "does not exist" in again.remark  # RocketMQ answers 0 too (deleteSubGroup -c)


async def test_a_group_config_body_of_the_wrong_shape_is_refused_with_the_field_named(client):
    bad_type = b'{"groupName":"g","brokerId":"x"}'
    resp = await client.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=bad_type)
    assert resp.code == RC.INVALID_PARAMETER and "brokerId='x' must be an integer" in resp.remark
    resp = await client.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"[]")
    assert resp.code == RC.INVALID_PARAMETER and "SubscriptionGroupConfig" in resp.remark


async def test_deleting_a_group_with_remove_offset_drops_its_offsets(client, admin, master):
    await client.create_topic("GoneGroupTopic", queues=1)
    assert (await client.create_group(group_config("g-gone"))).code == 0
    assert (await client.commit_offset("g-gone", "GoneGroupTopic", 0, 0)).code == 0
    assert "g-gone" in (await admin.all_consumer_offsets(master.addr)).groups()
    resp = await client.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g-gone", "cleanOffset": "true"})
    assert resp.code == 0 and "1 offset entries removed" in resp.remark
    assert "g-gone" not in (await admin.all_consumer_offsets(master.addr)).groups()


async def test_deleting_a_topic_drops_its_queues_and_consumer_offsets(client, admin, master):
    await client.create_topic("DoomedTopic", queues=1)
    assert (await client.send("DoomedTopic", 0, [message(b"x")])).code == 0
    assert (await client.create_group(group_config("g-doomed"))).code == 0
    assert (await client.commit_offset("g-doomed", "DoomedTopic", 0, 1)).code == 0
    resp = await client.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "DoomedTopic"})
    assert resp.code == 0, resp.remark
    offsets = await admin.all_consumer_offsets(master.addr)
    assert "DoomedTopic@g-doomed" not in offsets.offset_table
    queue = await admin.queue_offsets(master.addr, "DoomedTopic", 0)
    assert (queue.min_offset, queue.max_offset) == (0, 0)
    assert "DoomedTopic" not in await client.topic_configs()
    again = await client.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "DoomedTopic"})
    assert again.code == 0 and "does not exist" in again.remark  # RocketMQ answers 0 (deleteTopic asks every master)


async def test_bad_topic_names_and_system_topics_are_refused_with_their_code_and_a_remark(client):
    for name, code, says in (("bad topic", RC.INVALID_PARAMETER, "rename the topic"),
                             ("SCHEDULE_TOPIC_XXXX", RC.NO_PERMISSION, "system topic"),
                             ("DefaultCluster", RC.NO_PERMISSION, "cluster's name")):
        resp = await client.create_topic(name)
        assert resp.code == code and says in resp.remark, (name, resp.remark)
    resp = await client.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "NoCounts"})
    assert resp.code == RC.INVALID_PARAMETER and "readQueueNums is missing" in resp.remark
    resp = await client.create_topic("TooMany", queues=5000)
    assert resp.code == RC.INVALID_PARAMETER and "between 1 and 1024" in resp.remark
    resp = await client.create_topic("BadPerm", perm=9)
    assert resp.code == RC.INVALID_PARAMETER and "perm 9 is invalid" in resp.remark


async def test_a_created_topic_is_routed_by_the_nameserver_at_once(client, admin):
    assert (await client.create_topic("RoutedAtOnce", queues=3)).code == 0

    async def routed() -> bool:
        route = await admin.topic_route_raw("RoutedAtOnce")
        return route["queueDatas"][0]["writeQueueNums"] == 3
    await async_wait_until(routed, 10, "the nameserver to route RoutedAtOnce (registration after the change)", 0.05)


async def test_consume_and_topic_stats_show_broker_and_consumer_offsets(client, admin, master):
    await client.create_topic("StatsTopic", queues=2)
    assert (await client.send("StatsTopic", 1, [message(b"s%d" % i) for i in range(10)])).code == 0
    assert (await client.create_group(group_config("g-stats"))).code == 0
    assert (await client.commit_offset("g-stats", "StatsTopic", 1, 4)).code == 0
    stats = await admin.consume_stats(master.addr, "g-stats")
    q1 = next(q for q in stats.queues if q.topic == "StatsTopic" and q.queue_id == 1)
    assert (q1.broker_offset, q1.consumer_offset, q1.broker_name) == (10, 4, "broker-a") and q1.last_timestamp > 0
    raw = await client.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g-stats", "topic": "StatsTopic"})
    assert raw.code == 0 and b'"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"StatsTopic"}:' in raw.body
    assert body(raw)["consumeTps"] == 0.0  # nothing was pulled by the group
    topic = await admin.topic_stats(master.addr, "StatsTopic")
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in topic.queues] == [(0, 0, 0), (1, 0, 10)]
    assert topic.queues[1].last_update_timestamp > 0 and topic.queues[0].last_update_timestamp == 0
    assert topic.broker_name == "broker-a"
    missing = await client.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NoStatsTopic"})
    assert missing.code == RC.TOPIC_NOT_EXIST and "NoStatsTopic" in missing.remark
    unknown = await client.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g-never"})
    assert unknown.code == 0 and body(unknown)["offsetTable"] == {} and "no consume progress" in unknown.remark


async def test_consume_tps_counts_the_messages_the_group_pulled(client, master):
    await client.create_topic("TpsTopic", queues=1)
    assert (await client.send("TpsTopic", 0, [message(b"t%d" % i) for i in range(20)])).code == 0
    got = await client.pull("g-tps", "TpsTopic", 0, 0, max_nums=32)
    assert len(got.messages) == 20
    assert (await client.commit_offset("g-tps", "TpsTopic", 0, 20)).code == 0
    raw = await client.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g-tps"})
    assert body(raw)["consumeTps"] > 0


async def test_runtime_info_carries_what_clusterlist_reads_and_what_pyrmq_reports(client, master):
    before = int((await client.runtime_info())["msgPutTotal"])
    assert (await client.send("InfoTopic", 0, [message(b"a"), message(b"b")])).code == 0
    info = await client.runtime_info()
    assert int(info["msgPutTotal"]) == int(info["msgPutTotalTodayNow"]) == before + 2
    for key in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgGetTotalYesterdayMorning",
                "msgGetTotalTodayMorning", "msgGetTotalTodayNow", "sendThreadPoolQueueSize",
                "pullThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills",
                "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills", "earliestMessageTimeStamp"):
        assert int(info[key]) >= 0, key
    for key in ("putTps", "getTransferedTps", "commitLogDiskRatio"):
        assert float(info[key].split(" ")[0]) >= 0, key
    assert info["brokerRole"] == "ASYNC_MASTER" and info["brokerAddr"] == master.addr
    assert info["haServerAddr"] == master.ha_addr and int(info["bootTimestamp"]) > 0
    assert info["brokerVersionDesc"].startswith("pyrmq ") and info["brokerVersion"] == "407"
    assert (info["haSlaveNum"], info["inSyncSlaveNums"]) == ("0", "0")


async def test_broker_config_is_properties_text_with_a_data_version_header(client, master):
    resp = await client.request(RequestCode.GET_BROKER_CONFIG)
    assert resp.code == 0
    lines = dict(line.split("=", 1) for line in resp.body.decode().splitlines())
    assert lines["brokerName"] == "broker-a" and lines["messageDelayLevel"] == "1s 1s 2s"
    assert lines["listenPort"] == str(master.port)
    version = fastjson.loads(resp.ext["version"])
    assert set(version) == {"counter", "stateVersion", "timestamp"} and version["timestamp"] > 0


async def test_update_broker_config_refuses_runtime_changes_and_says_to_restart(client):
    same = await client.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerName=broker-a\n")
    assert same.code == 0 and "nothing changed" in same.remark
    change = await client.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerName=broker-a\nslaveReadEnable=true\n")
    assert change.code == RC.NO_PERMISSION
    assert "slaveReadEnable" in change.remark and "restart" in change.remark and "brokerName" not in change.remark
    unknown = await client.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"noSuchKey=1\n")
    assert unknown.code == RC.INVALID_PARAMETER and "noSuchKey" in unknown.remark


async def test_ha_status_of_a_master_without_slaves(client, admin, master):
    raw = await client.request(RequestCode.GET_BROKER_HA_STATUS)
    status = body(raw)
    assert raw.code == 0 and status["master"] is True and status["haConnectionInfo"] == []
    assert status["role"] == "ASYNC_MASTER" and status["masterCommitLogMaxOffset"] == status["commitLogMaxOffset"]
    ha = await admin.ha_status(master.addr)
    assert ha.role == "ASYNC_MASTER" and ha.commitlog_max_offset >= ha.commitlog_min_offset >= 0


@pytest.fixture
async def three_clients(master):
    """Three connections: a client is known by its connection, as in RocketMQ."""
    clients = [BrokerClient(master.addr) for _ in range(3)]
    yield clients
    for c in clients:
        await c.close()


async def test_heartbeats_list_consumers_and_their_connections_and_unregister_removes_them(
    client, admin, master, three_clients
):
    for conn, cid in zip(three_clients, ("c-2", "c-1", "c-3"), strict=True):
        assert (await conn.heartbeat(cid, {"g-hb": {"HbTopic": "a || b"}}, ["p-hb"])).code == 0
    assert body(await client.consumer_ids("g-hb"))["consumerIdList"] == ["c-1", "c-2", "c-3"]
    conns = await admin.consumer_connection(master.addr, "g-hb")
    assert [c.client_id for c in conns.connections] == ["c-1", "c-2", "c-3"]
    assert conns.subscriptions == {"HbTopic": "a || b"} and conns.consume_type == "CONSUME_PASSIVELY"
    assert conns.message_model == "CLUSTERING" and conns.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
    assert all(c.client_addr.startswith("127.0.0.1:") and c.language == "PYTHON" for c in conns.connections)
    raw = body(await client.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g-hb"}))
    assert raw["subscriptionTable"]["HbTopic"]["tagsSet"] == ["a", "b"] and raw["connectionSet"][0]["version"] > 0
    producers = await client.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "p-hb"})
    assert producers.code == 0 and {c["clientId"] for c in body(producers)["connectionSet"]} == {"c-1", "c-2", "c-3"}
    none = await client.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "p-none"})
    assert none.code == RC.SYSTEM_ERROR and "p-none" in none.remark

    resp = await three_clients[0].request(RequestCode.UNREGISTER_CLIENT, {"clientID": "c-2", "consumerGroup": "g-hb"})
    assert resp.code == 0
    assert body(await client.consumer_ids("g-hb"))["consumerIdList"] == ["c-1", "c-3"]
    assert "%RETRY%g-hb" in await client.topic_configs()  # created on heartbeat
    with pytest.raises(BrokerError) as err:
        await admin.consumer_connection(master.addr, "g-nobody")
    assert err.value.code == RC.CONSUMER_NOT_ONLINE


async def test_view_message_returns_the_record_at_a_commitlog_offset(client, admin, master):
    sent = await client.send("ViewTopic", 0, [message(b"look at me", KEYS="k1")])
    record = await admin.view_message(master.addr, sent.physical_offset)
    msg = decode(record, check_crc=True)
    assert msg.body == b"look at me" and msg.physical_offset == sent.physical_offset and msg.keys == "k1"
    bad = await client.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(sent.physical_offset + 3)})
    assert bad.code == RC.INVALID_PARAMETER and "can not find message by the offset" in bad.remark


async def query_message(client, topic: str, key: str, *, unique: bool = False, max_num: int = 32, begin: int = 0):
    ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin),
           "endTimestamp": str(2**63 - 1), "_UNIQUE_KEY_QUERY": "true" if unique else "false"}
    return await client.request(RequestCode.QUERY_MESSAGE, ext)


async def test_query_message_finds_records_by_key_and_by_uniq_key(client):
    await client.create_topic("QueryTopic", queues=2)
    t0 = int(time.time() * 1000) - 1000
    await client.send("QueryTopic", 0, [message(b"one", KEYS="order-1 shared", UNIQ_KEY="U1")])
    last = await client.send("QueryTopic", 1, [message(b"two", KEYS="shared", UNIQ_KEY="U2")])
    await client.send("OtherTopic", 0, [message(b"other", KEYS="shared")])

    async def check() -> None:
        shared = await query_message(client, "QueryTopic", "shared", begin=t0)
        assert shared.code == 0 and sorted(m.body for m in iter_records(shared.body_bytes(), check_crc=True)) == [
            b"one", b"two"]
        newest = await query_message(client, "QueryTopic", "shared", max_num=1)
        assert [m.body for m in iter_records(newest.body_bytes())] == [b"two"]  # newest first, as RocketMQ's index
        by_uniq = await query_message(client, "QueryTopic", "U1", unique=True)
        assert [m.body for m in iter_records(by_uniq.body_bytes())] == [b"one"]
        missing = await query_message(client, "QueryTopic", "nope")
        assert missing.code == RC.QUERY_NOT_FOUND and "maybe time range not correct" in missing.remark
        too_late = await query_message(client, "QueryTopic", "order-1", begin=int(time.time() * 1000) + 60_000)
        assert too_late.code == RC.QUERY_NOT_FOUND

    await check()  # at once: what the index has not reached yet is scanned

    async def indexed() -> bool:
        resp = await query_message(client, "QueryTopic", "U2", unique=True)
        return int(resp.ext["indexLastUpdatePhyoffset"]) >= last.physical_offset

    await async_wait_until(indexed, 10, "the broker's index to reach the last message sent")
    await check()  # from the index


async def test_query_message_by_key_is_answered_from_the_index_with_maxnum_and_the_time_range(client):
    await client.create_topic("Indexed", queues=1)
    t0 = int(time.time() * 1000)
    sent = []
    for i in range(100):
        sent.append(await client.send("Indexed", 0, [message(f"m{i}".encode(), KEYS=f"k{i % 5} all")]))

    async def caught_up() -> bool:
        resp = await query_message(client, "Indexed", "all")
        return int(resp.ext["indexLastUpdatePhyoffset"]) >= sent[-1].physical_offset

    await async_wait_until(caught_up, 10, "the broker's index to reach the last message sent")
    k3 = await query_message(client, "Indexed", "k3", max_num=64)
    assert [m.body for m in iter_records(k3.body_bytes())] == [f"m{i}".encode() for i in range(98, -1, -5)]
    capped = await query_message(client, "Indexed", "all", max_num=1000)
    assert len(list(iter_records(capped.body_bytes()))) == 64  # RocketMQ's maxMsgsNumBatch
    unique = await query_message(client, "Indexed", "all", unique=True)
    assert len(list(iter_records(unique.body_bytes()))) == 32  # RocketMQ's defaultQueryMaxNum for UNIQ_KEY queries
    before = await query_message(client, "Indexed", "k3", begin=0)
    assert before.code == 0
    none = await query_message(client, "Indexed", "k3", begin=t0 + 3_600_000)
    assert none.code == RC.QUERY_NOT_FOUND and "index has no message" in none.remark


async def test_a_query_and_another_request_in_flight_on_one_connection_are_both_answered(client):
    ext = {"topic": "QueryTopic", "key": "x", "maxNum": "1", "beginTimestamp": "0",
           "endTimestamp": str(2**63 - 1)}
    scan, info = await asyncio.gather(client.request(RequestCode.QUERY_MESSAGE, ext), client.runtime_info())
    assert scan.code in (0, RC.QUERY_NOT_FOUND) and info["brokerName"] == "broker-a"
