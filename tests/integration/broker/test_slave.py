"""A SLAVE (brokerRole=SLAVE, brokerId=1, no master running) refuses writes from producers and admins over remoting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from tests.integration.broker.rpc import BrokerClient, group_config, make_broker, message

pytestmark = pytest.mark.integration

ROCKETMQ_SLAVE_REMARK = (
    "Can't modify topic or subscription group from slave broker, please execute it from master broker"
)


@pytest.fixture(scope="module")
def slave(tmp_path_factory, namesrv):
    broker = make_broker(
        tmp_path_factory.mktemp("slave"), name="broker-s", namesrv_addr=namesrv.addr, role="SLAVE", broker_id=1
    )
    seed_synced_metadata(broker.store_dir / "config")
    with broker:
        yield broker


def seed_synced_metadata(config_dir: Path) -> None:
    """The topic and groups a slave holds from its last metadata sync (this one has no master to sync from)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    version = {"counter": 1, "timestamp": 1}
    topic = {"topicName": "AnyTopic", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
    (config_dir / "topics.json").write_text(
        json.dumps({"dataVersion": version, "topicConfigTable": {"AnyTopic": topic}})
    )
    groups = {g: group_config(g) for g in ("g-s", "g-back")}
    (config_dir / "subscriptionGroup.json").write_text(
        json.dumps({"dataVersion": version, "subscriptionGroupTable": groups})
    )


@pytest.fixture
async def slave_client(slave):
    async with BrokerClient(slave.addr) as c:
        yield c


async def test_a_slave_refuses_sends_and_says_to_send_to_the_master(slave_client):
    resp = await slave_client.send("AnyTopic", 0, [message(b"x")])
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert resp.remark == "broker broker-s id 1 is a slave; send to the master"


async def test_a_slave_refuses_admin_writes_with_rocketmqs_remark_and_says_to_modify_on_the_master(slave_client):
    for resp in (
        await slave_client.create_topic("T1", queues=1),
        await slave_client.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T1"}),
        await slave_client.create_group(group_config("G1")),
        await slave_client.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G1"}),
    ):
        assert resp.code == ResponseCode.NO_PERMISSION  # RocketMQ: 1, which tells a caller to retry
        assert resp.remark.startswith(ROCKETMQ_SLAVE_REMARK) and "modify on the master" in resp.remark
    assert "T1" not in await slave_client.topic_configs()


async def test_a_slave_accepts_offset_commits_and_reports_its_role(slave_client):
    assert (await slave_client.commit_offset("g-s", "AnyTopic", 0, 0)).code == ResponseCode.SUCCESS
    assert await slave_client.query_offset("g-s", "AnyTopic", 0) == (ResponseCode.SUCCESS, 0)
    past = await slave_client.commit_offset("g-s", "AnyTopic", 0, 4)  # beyond what the slave holds: refused
    assert past.code == ResponseCode.INVALID_PARAMETER and "past the max offset 0" in past.remark
    unknown = await slave_client.commit_offset("g-unsynced", "AnyTopic", 0, 0)
    assert unknown.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    status = await slave_client.request(RequestCode.GET_BROKER_HA_STATUS)
    ha = fastjson.loads(status.body_bytes())
    assert status.code == 0 and ha["role"] == "SLAVE" and ha["master"] is False
    assert ha["haClientRuntimeInfo"]["isActivated"] is False  # no master to replicate from
    info = await slave_client.runtime_info()
    assert (info["brokerRole"], info["brokerId"], info["haMasterConnected"]) == ("SLAVE", "1", "false")


async def test_a_slave_serves_its_offsets_for_a_restarting_master(slave_client):
    assert (await slave_client.commit_offset("g-back", "AnyTopic", 1, 0)).code == ResponseCode.SUCCESS
    resp = await slave_client.request(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert resp.code == 0 and fastjson.loads(resp.body_bytes())["offsetTable"]["AnyTopic@g-back"] == {"1": 0}


async def test_a_slave_answers_a_pull_beyond_its_data_with_retry_at_the_same_offset(slave_client):
    got = await slave_client.pull("g-s", "SCHEDULE_TOPIC_XXXX", 0, 5)
    assert got.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert got.next_begin_offset == 5 and got.suggest_which_broker_id == 0


async def test_a_slave_asked_for_a_topic_it_has_not_synced_says_so_instead_of_advising_updatetopic(slave_client):
    # Right after a master dies, a topic created on it less than one sync interval before is missing here; the
    # reader must retry or wait for the master, since updateTopic is refused by a slave (issue 22 item 12).
    for resp in (
        (await slave_client.pull("g-s", "CreatedOnTheMasterJustNow", 0, 0)).command,
        await slave_client.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "CreatedOnTheMasterJustNow"}),
    ):
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert resp.remark.startswith(
            "topic[CreatedOnTheMasterJustNow] not exist on slave broker broker-s id 1: this slave has not synced"
            " the topic from its master yet"
        ), resp.remark
        assert "retry" in resp.remark and "updateTopic" not in resp.remark
