"""Bad requests to a real nameserver: each gets a response code and a remark that says what to send instead, nothing
is stored, and the connection keeps serving (spec remoting.md §1.6; issue 16 "Bad input")."""

from __future__ import annotations

import pytest

from namesrv.bodies import body_crc32
from remoting.codes import RequestCode, ResponseCode
from tests.integration.namesrv.conftest import (
    Names,
    register,
    register_body,
    register_command,
    request,
    route_addrs,
)

pytestmark = pytest.mark.integration


async def test_an_unknown_request_code_is_answered_request_code_not_supported(namesrv, client):
    resp = await request(client, namesrv.addr, 9999)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "request type 9999 not supported" in resp.remark
    # a broker-only code sent to the nameserver too
    resp = await request(client, namesrv.addr, RequestCode.SEND_MESSAGE)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "10" in resp.remark


@pytest.mark.parametrize(
    "change, code, words",
    [
        ({"brokerName": ""}, ResponseCode.INVALID_PARAMETER, ["brokerName is missing"]),
        ({"brokerId": "١"}, ResponseCode.INVALID_PARAMETER, ["brokerId", "not a decimal"]),
        ({"brokerId": "-1"}, ResponseCode.INVALID_PARAMETER, ["brokerId -1 is negative"]),
        ({"brokerAddr": "no-port"}, ResponseCode.INVALID_PARAMETER, ["brokerAddr", "listenPort"]),
        ({"haServerAddr": "h:99999"}, ResponseCode.INVALID_PARAMETER, ["haServerAddr", "haListenPort"]),
        ({"haServerAddr": "h:²"}, ResponseCode.INVALID_PARAMETER, ["haServerAddr", "not a decimal integer"]),
        ({"brokerAddr": "h:١٠٩١١"}, ResponseCode.INVALID_PARAMETER, ["brokerAddr", "not a decimal integer"]),
        ({"compressed": "maybe"}, ResponseCode.INVALID_PARAMETER, ["compressed", "true/false"]),
        ({"bodyCrc32": "12"}, ResponseCode.SYSTEM_ERROR, ["crc32 not match"]),
    ],
)
async def test_a_bad_registration_header_is_refused_with_the_field_and_nothing_is_stored(
    namesrv, client, names, change, code, words
):
    resp = await register(client, namesrv.addr, names, topics=[names.topic], **change)
    assert resp.code == code, resp.remark
    assert all(w in resp.remark for w in words), resp.remark
    assert await route_addrs(client, namesrv.addr, names.topic) is None


@pytest.mark.parametrize(
    "body, compressed, words",
    [
        (b"not json", "false", ["not JSON", "expected a RegisterBrokerBody"]),
        (b'["a"]', "false", ["is an array", "expected a RegisterBrokerBody"]),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"rw"}}}}', "false", ["perm='rw'"]),
        (b"{}", "true", ["not a zlib stream"]),
    ],
)
async def test_a_bad_registration_body_answers_29_with_what_was_expected(namesrv, client, names, body, compressed,
                                                                          words):
    resp = await register(client, namesrv.addr, names, body=body, compressed=compressed)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark.startswith("REGISTER_BROKER body: ") and all(w in resp.remark for w in words), resp.remark
    info = await request(client, namesrv.addr, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert names.broker_name.encode() not in info.body_bytes()


async def test_a_matching_body_crc_is_accepted(namesrv, client, names):
    body = register_body([names.topic])
    resp = await client.invoke(namesrv.addr, register_command(names, body=body, bodyCrc32=str(body_crc32(body))), 5)
    assert resp.code == 0, resp.remark


@pytest.mark.parametrize(
    "code, ext, field",
    [
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "topic"),
        (RequestCode.UNREGISTER_BROKER, {"brokerName": "b", "brokerAddr": "h:1", "clusterName": "c"}, "brokerId"),
        (RequestCode.DELETE_TOPIC_IN_NAMESRV, {}, "topic"),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}, "brokerName"),
        (RequestCode.ADD_WRITE_PERM_OF_BROKER, {}, "brokerName"),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {}, "cluster"),
        (RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k"}, "value"),
        (RequestCode.GET_KV_CONFIG, {"namespace": "N"}, "key"),
        (RequestCode.DELETE_KV_CONFIG, {"key": "k"}, "namespace"),
        (RequestCode.GET_KVLIST_BY_NAMESPACE, {}, "namespace"),
        (RequestCode.QUERY_DATA_VERSION, {"brokerName": "b", "brokerAddr": "h:1", "clusterName": "c"}, "brokerId"),
    ],
)
async def test_a_missing_header_field_is_named(namesrv, client, code, ext, field):
    resp = await request(client, namesrv.addr, code, ext)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert f"header field {field} is missing" in resp.remark, resp.remark


async def test_a_bad_data_version_body_of_query_data_version_says_what_was_expected(namesrv, client, names):
    header = {"clusterName": names.cluster, "brokerName": names.broker_name, "brokerAddr": names.master_addr,
              "brokerId": "0"}
    resp = await request(client, namesrv.addr, RequestCode.QUERY_DATA_VERSION, header, body=b"[]")
    assert resp.code == ResponseCode.INVALID_PARAMETER and "expected" in resp.remark and "DataVersion" in resp.remark


async def test_the_connection_keeps_serving_after_bad_requests(namesrv, client):
    names = Names()
    for _ in range(3):
        await register(client, namesrv.addr, names, body=b"junk")
        await request(client, namesrv.addr, 12345)
    assert (await register(client, namesrv.addr, names, topics=[names.topic])).code == 0
    assert await route_addrs(client, namesrv.addr, names.topic) == {0: names.master_addr}
