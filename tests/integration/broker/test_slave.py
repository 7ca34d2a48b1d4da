"""A SLAVE (brokerRole=SLAVE, brokerId=1; no HA wired yet) refuses writes from producers and admins."""

from __future__ import annotations

import pytest

from remoting.codes import ResponseCode
from remoting.pb import admin_pb2, common_pb2
from tests.integration.broker.rpc import BrokerClient, make_broker, message

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slave(tmp_path_factory, namesrv):
    broker = make_broker(
        tmp_path_factory.mktemp("slave"), name="broker-s", namesrv_addr=namesrv.addr, role="SLAVE", broker_id=1
    ).start()
    yield broker
    broker.stop()


@pytest.fixture
async def slave_client(slave):
    c = BrokerClient(slave.addr)
    yield c
    await c.close()


async def test_a_slave_refuses_sends_and_says_to_send_to_the_master(slave_client):
    resp = await slave_client.send("AnyTopic", 0, [message(b"x")])
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert resp.remark == "broker broker-s id 1 is a slave; send to the master"


async def test_a_slave_refuses_admin_writes_and_says_to_modify_on_the_master(slave_client):
    ack = await slave_client.admin.UpdateAndCreateTopic(
        common_pb2.TopicConfig(topic_name="T1", read_queue_nums=1, write_queue_nums=1, perm=6), timeout=10
    )
    assert ack.code == ResponseCode.SYSTEM_ERROR and "modify on the master" in ack.remark
    ack = await slave_client.admin.UpdateAndCreateSubscriptionGroup(
        admin_pb2.SubscriptionGroupConfig(group_name="G1", retry_queue_nums=1), timeout=10
    )
    assert ack.code == ResponseCode.SYSTEM_ERROR and "modify on the master" in ack.remark


async def test_a_slave_accepts_offset_commits_and_reports_its_role(slave_client):
    assert (await slave_client.commit_offset("g-s", "AnyTopic", 0, 4)).code == ResponseCode.SUCCESS
    assert (await slave_client.query_offset("g-s", "AnyTopic", 0)).offset == 4
    status = await slave_client.admin.GetHAStatus(admin_pb2.Empty(), timeout=10)
    assert status.code == 0 and status.role == "SLAVE"
    info = await slave_client.runtime_info()
    assert (info["brokerRole"], info["brokerId"]) == ("SLAVE", "1")


async def test_a_slave_answers_a_pull_beyond_its_data_with_retry_at_the_same_offset(slave_client):
    got = await slave_client.pull("g-s", "SCHEDULE_TOPIC_XXXX", 0, 5)
    assert got.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert got.response.next_begin_offset == 5 and got.response.suggest_which_broker_id == 0
