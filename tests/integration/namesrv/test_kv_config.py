"""The nameserver's KV config (PUT/GET/DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE) and the ORDER_TOPIC_CONFIG
namespace that ``updateTopic -o`` writes: carried by every REGISTER_BROKER reply, and by routes as
``orderTopicConf`` when ``orderMessageEnable`` (spec remoting.md §2.1, §5.3, §5.5)."""

from __future__ import annotations

import json

import pytest

from remoting import fastjson
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.integration.namesrv.conftest import Names, register, request, route
from harness.procs import Namesrv

pytestmark = pytest.mark.integration

ORDER = "ORDER_TOPIC_CONFIG"


async def put(client, addr, namespace, key, value):
    return await request(client, addr, RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})


async def test_put_get_list_and_delete(namesrv, client):
    ns = "TestNamespace1"
    assert (await put(client, namesrv.addr, ns, "k1", "v1")).code == 0
    assert (await put(client, namesrv.addr, ns, "k2", "v 2")).code == 0
    got = await request(client, namesrv.addr, RequestCode.GET_KV_CONFIG, {"namespace": ns, "key": "k2"})
    assert (got.code, got.ext["value"]) == (0, "v 2")
    listed = await request(client, namesrv.addr, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": ns})
    assert listed.code == 0 and fastjson.loads(listed.body_bytes()) == {"table": {"k1": "v1", "k2": "v 2"}}

    deleted = await request(client, namesrv.addr, RequestCode.DELETE_KV_CONFIG, {"namespace": ns, "key": "k1"})
    assert deleted.code == 0
    missing = await request(client, namesrv.addr, RequestCode.GET_KV_CONFIG, {"namespace": ns, "key": "k1"})
    assert missing.code == ResponseCode.QUERY_NOT_FOUND and "k1" in missing.remark
    again = await request(client, namesrv.addr, RequestCode.DELETE_KV_CONFIG, {"namespace": ns, "key": "k1"})
    assert again.code == 0 and "nothing to delete" in again.remark


async def test_an_empty_namespace_is_not_found(namesrv, client):
    resp = await request(client, namesrv.addr, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NoSuchNs"})
    assert resp.code == ResponseCode.QUERY_NOT_FOUND and "NoSuchNs" in resp.remark


async def test_the_register_reply_carries_the_order_topic_config_and_the_kv_config_survives_a_restart(tmp_path):
    kv_path = tmp_path / "kv" / "kvConfig.json"
    ns = Namesrv(tmp_path, kvConfigPath=kv_path, orderMessageEnable=True).start()
    client = RemotingClient()
    names = Names()
    try:
        empty = await register(client, ns.addr, names, topics=[names.topic])
        assert empty.code == 0 and empty.body_bytes() == b""
        assert not kv_path.exists(), "the KV file is written only when an entry changes"
        assert (await put(client, ns.addr, ORDER, names.topic, f"{names.broker_name}:4")).code == 0
        reply = await register(client, ns.addr, names, topics=[names.topic])
        assert fastjson.loads(reply.body_bytes()) == {"table": {names.topic: f"{names.broker_name}:4"}}
        data = fastjson.loads((await route(client, ns.addr, names.topic)).body_bytes())
        assert data["orderTopicConf"] == f"{names.broker_name}:4"
        assert json.loads(kv_path.read_text()) == {"configTable": {ORDER: {names.topic: f"{names.broker_name}:4"}}}

        await client.close()
        ns.stop()
        ns.start()
        client = RemotingClient()
        got = await request(client, ns.addr, RequestCode.GET_KV_CONFIG, {"namespace": ORDER, "key": names.topic})
        assert (got.code, got.ext["value"]) == (0, f"{names.broker_name}:4")
    finally:
        await client.close()
        ns.stop()


async def test_routes_carry_no_order_topic_conf_unless_order_message_enable(namesrv, client, names):
    await register(client, namesrv.addr, names, topics=[names.topic])
    assert (await put(client, namesrv.addr, ORDER, names.topic, f"{names.broker_name}:4")).code == 0
    data = fastjson.loads((await route(client, namesrv.addr, names.topic)).body_bytes())
    assert "orderTopicConf" not in data
    await request(client, namesrv.addr, RequestCode.DELETE_KV_CONFIG, {"namespace": ORDER, "key": names.topic})


async def test_an_unwritable_kv_path_still_answers_with_a_remark_saying_it_is_not_persisted(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ns = Namesrv(tmp_path, kvConfigPath=blocker / "kvConfig.json").start()
    client = RemotingClient()
    try:
        resp = await put(client, ns.addr, "N", "k", "v")
        assert resp.code == 0 and "in memory only" in resp.remark and "kvConfigPath" in resp.remark
        got = await request(client, ns.addr, RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "k"})
        assert got.ext["value"] == "v"
    finally:
        await client.close()
        ns.stop()
