"""The nameserver's JSON bodies: golden shapes of routes and cluster info (bare keys for old callers, quoted for
new ones, spec remoting.md §5.1-§5.4), and the registration body in both forms (§5.5) with its bad-input answers."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv import bodies
from namesrv.route_table import DataVersion, RouteInfoManager, TopicConfig
from remoting import fastjson

MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"


@pytest.fixture
def table():
    t = RouteInfoManager()
    for addr, bid, ha in ((MASTER, 0, "10.0.0.1:10912"), (SLAVE, 1, "10.0.0.2:10912")):
        t.register_broker(cluster="DefaultCluster", broker_name="broker-a", broker_addr=addr, broker_id=bid,
                          ha_server_addr=ha, data_version=DataVersion(1_700_000_000_000, 3, state_version=2),
                          topic_configs=[TopicConfig("T", 4, 4, 6)], now_ms=1_000)
    return t


ROUTE_QUOTED = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)
ROUTE_BARE = ROUTE_QUOTED.replace(b'"0":', b"0:").replace(b'"1":', b"1:")


def test_route_for_a_caller_from_4_9_4_on_quotes_the_broker_ids(table):
    route = table.pickup_topic_route("T")
    assert bodies.dumps(bodies.route_json(route), standard=bodies.standard_json(407, False)) == ROUTE_QUOTED


@pytest.mark.parametrize("version", [0, 63, 317, 400])
def test_route_for_an_older_caller_writes_the_broker_ids_bare_as_fastjson_does(table, version):
    route = table.pickup_topic_route("T")
    assert bodies.dumps(bodies.route_json(route), standard=bodies.standard_json(version, False)) == ROUTE_BARE


def test_accept_standard_json_only_gets_quoted_ids_whatever_the_version(table):
    assert bodies.standard_json(317, True)
    route = bodies.route_json(table.pickup_topic_route("T"))
    assert bodies.dumps(route, standard=bodies.standard_json(317, True)) == ROUTE_QUOTED


def test_bare_and_quoted_routes_read_back_the_same_and_the_quoted_one_is_plain_json(table):
    assert json.loads(ROUTE_QUOTED)["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER, "1": SLAVE}
    assert fastjson.loads(ROUTE_BARE)["brokerDatas"][0]["brokerAddrs"] == {0: MASTER, 1: SLAVE}


def test_go_clients_parse_of_bare_broker_addrs_finds_both_ids(table):
    # rocketmq-client-go: strip the braces, split on ',', the id is the text before the first ':'
    text = bodies.dumps(bodies.route_json(table.pickup_topic_route("T")), standard=False).decode()
    raw = text[text.index('"brokerAddrs":') + len('"brokerAddrs":'):]
    raw = raw[: raw.index("}") + 1]
    parsed = {int(s[: s.index(":")]): s[s.index(":") + 1:].replace('"', "") for s in raw[1:-1].split(",")}
    assert parsed == {0: MASTER, 1: SLAVE}


def test_route_carries_order_topic_conf_only_when_given(table):
    route = table.pickup_topic_route("T")
    assert "orderTopicConf" not in bodies.route_json(route)
    out = bodies.dumps(bodies.route_json(route, "broker-a:4"))
    assert b'"filterServerTable":{},"orderTopicConf":"broker-a:4","queueDatas":' in out


def test_cluster_info_golden_shape_with_the_live_table(table):
    info = bodies.cluster_info_json(table.broker_addr_table, table.cluster_addr_table, table.live_brokers(),
                                    wall_offset_ms=1_700_000_000_000)
    live = (
        '{"dataVersion":{"counter":3,"stateVersion":2,"timestamp":1700000000000},"haServerAddr":"%s",'
        '"heartbeatTimeoutMillis":120000,"lastUpdateTimestamp":1700000001000}'
    )
    assert bodies.dumps(info, standard=False).decode() == (
        '{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
        '"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},'
        '"brokerLiveTable":{"10.0.0.1:10911":' + live % "10.0.0.1:10912" + ","
        '"10.0.0.2:10911":' + live % "10.0.0.2:10912" + "},"
        '"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    )


def test_kv_table_and_topic_list_shapes():
    assert bodies.kv_table({"b": "2", "a": "1"}) == b'{"table":{"a":"1","b":"2"}}'
    assert bodies.topic_list(["A", "B"]) == b'{"topicList":["A","B"]}'


# registration body ----------------------------------------------------------------------------------------------
REGISTER_JSON = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":7,"stateVersion":0,'
    b'"timestamp":1700000000000},"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,'
    b'"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":8},'
    b'"%RETRY%g":{"perm":6,"readQueueNums":1,"topicName":"%RETRY%g","writeQueueNums":1,"order":true}}}}'
)


def test_a_java_brokers_json_registration_body_decodes():
    body = bodies.decode_register_body(REGISTER_JSON, compressed=False)
    assert body.data_version == DataVersion(1_700_000_000_000, 7)
    assert body.topic_configs == [TopicConfig("T", 4, 8, 6, 0, False), TopicConfig("%RETRY%g", 1, 1, 6, 0, True)]
    assert body.filter_server_list == []


def test_an_empty_body_registers_no_topics_with_data_version_zero():
    assert bodies.decode_register_body(b"", compressed=False) == bodies.RegisterBody(DataVersion(0, 0), [], [])


def test_a_broker_older_than_3_0_11_sends_the_wrapper_alone():
    wrapper = json.loads(REGISTER_JSON)["topicConfigSerializeWrapper"]
    body = bodies.decode_register_body(json.dumps(wrapper).encode(), compressed=False, version=36)
    assert [tc.topic_name for tc in body.topic_configs] == ["T", "%RETRY%g"]


def test_compressed_registration_golden_bytes_decode():
    dv = b'{"counter":7,"timestamp":1700000000000}'
    line = b"T 4 8 6 SINGLE_TAG"
    attrs = b'T2 2 2 4 MULTI_TAG {"+message.type":"NORMAL"}'
    raw = (struct.pack(">i", len(dv)) + dv + struct.pack(">i", 2) + struct.pack(">i", len(line)) + line
           + struct.pack(">i", len(attrs)) + attrs + struct.pack(">i", 2) + b"[]")
    body = bodies.decode_register_body(zlib.compress(raw, 9), compressed=True)
    assert body.data_version == DataVersion(1_700_000_000_000, 7)
    assert body.topic_configs == [TopicConfig("T", 4, 8, 6), TopicConfig("T2", 2, 2, 4)]


@settings(max_examples=50, deadline=None)
@given(
    topics=st.lists(
        st.builds(TopicConfig, st.text("abcXYZ_-%0123456789", min_size=1, max_size=20), st.integers(0, 64),
                  st.integers(0, 64), st.sampled_from([2, 4, 6, 7])),
        max_size=5, unique_by=lambda t: t.topic_name,
    ),
    counter=st.integers(0, 2**40),
)
def test_compressed_form_round_trips(topics, counter):
    dv = DataVersion(1_700_000_000_000, counter)
    encoded = bodies.encode_register_body_compressed(dv, topics, ["f:1"])
    assert bodies.decode_register_body(encoded, compressed=True) == bodies.RegisterBody(dv, topics, ["f:1"])


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"not json", "not JSON"),
        (b"[1,2]", "is an array; expected a RegisterBrokerBody"),
        (b'{"topicConfigSerializeWrapper":[]}', "topicConfigSerializeWrapper is an array"),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":[]}}', "topicConfigTable is an array"),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":5}}}', "expected a TopicConfig"),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":9}}}}', "perm=9"),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"4"}}}}', "readQueueNums='4'"),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"order":1}}}}', "order=1"),
        (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"":{}}}}', "not a topic name"),
        (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1.5}}}', "counter=1.5"),
        (b'{"topicConfigSerializeWrapper":{"dataVersion":"x"}}', "dataVersion is a string"),
        (b'{"filterServerList":[1]}', "filterServerList is an array; expected an array of strings"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_a_bad_json_body_says_what_was_expected(body, expected):
    with pytest.raises(bodies.BodyError) as err:
        bodies.decode_register_body(body, compressed=False)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"plain text", "not a zlib stream"),
        (zlib.compress(b"\x00\x00"), "ends before the length of the DataVersion"),
        (zlib.compress(struct.pack(">i", 99) + b"{}"), "claims 99 bytes"),
        (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 3) + b"T 4"),
         "has 2 fields"),
        (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 20)
                       + b"T 4 x 6 SINGLE_TAG   "[:20]), "writeQueueNums='x'"),
        (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 0) + struct.pack(">i", 2) + b"[]" + b"!"),
         "bytes after its end"),
        (zlib.compress(b"x" * 100)[:-6], "truncated zlib stream"),
    ],
)
def test_a_bad_compressed_body_says_what_was_wrong(raw, expected):
    with pytest.raises(bodies.BodyError) as err:
        bodies.decode_register_body(raw, compressed=True)
    assert expected in str(err.value)


def test_a_compressed_body_that_inflates_past_the_cap_is_refused(monkeypatch):
    monkeypatch.setattr(bodies, "MAX_INFLATED", 1000)
    with pytest.raises(bodies.BodyError, match="inflates past 1000 bytes"):
        bodies.decode_register_body(zlib.compress(b"\x00" * 5000), compressed=True)


def test_body_crc32_is_rocketmqs_masked_crc():
    assert bodies.body_crc32(b"123456789") == 0xCBF43926 & 0x7FFFFFFF


def test_data_version_body_of_query_data_version():
    assert bodies.decode_data_version(b'{"counter":2,"timestamp":5}', "q") == DataVersion(5, 2)
    with pytest.raises(bodies.BodyError, match="expected q: a DataVersion"):
        bodies.decode_data_version(b"[]", "q")


def test_the_brokers_registration_body_reads_back_on_the_nameserver(tmp_path):
    from broker.metadata.topics import TopicConfig as BrokerTopicConfig
    from broker.metadata.topics import TopicConfigManager
    from broker.registration import body_crc32 as broker_crc32
    from broker.registration import register_body

    manager = TopicConfigManager(tmp_path)
    manager.update(BrokerTopicConfig("T", 2, 3, 6, 0, True))
    body = register_body(manager, broker_permission=4)
    decoded = bodies.decode_register_body(body, compressed=False)
    assert decoded.topic_configs == [TopicConfig("T", 2, 3, 4, 0, True)]
    assert decoded.data_version == DataVersion(manager.data_version.timestamp, manager.data_version.counter)
    assert b'"stateVersion":0' in body and broker_crc32(body) == bodies.body_crc32(body)
