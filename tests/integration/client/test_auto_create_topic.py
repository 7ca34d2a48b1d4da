"""Topics created by their first send, RocketMQ's TBW102 path (issue 15.4), with real processes.

A producer finds no route for a new topic, sends by the route of ``TBW102`` (which only brokers with
autoCreateTopicEnable=true register) capped at defaultTopicQueueNums (4), and such a broker creates the topic from
TBW102's config and registers it at once. A cluster where no broker allows it refuses clearly: the broker answers
TOPIC_NOT_EXIST saying which key and which command, and AdminClient.topic_route_for_send (what ``mqctl sendMessage``
needs) says that no broker registers TBW102.
"""

from __future__ import annotations

import pytest

from client import AdminClient, BrokerError, Message, MessageQueue, NoRouteError, Producer, PullConsumer, SendStatus
from harness.procs import Broker, Namesrv
from remoting.codes import ResponseCode
from tests.integration.client.conftest import unique, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def auto_cluster(tmp_path_factory):
    """broker-auto allows auto-creation (the default); broker-manual, in the same cluster, does not."""
    root = tmp_path_factory.mktemp("auto")
    ns = Namesrv(root / "namesrv").start()
    auto = Broker(root / "auto", name="broker-auto", namesrv_addr=ns.addr).start()
    manual = Broker(root / "manual", name="broker-manual", namesrv_addr=ns.addr, autoCreateTopicEnable=False).start()
    yield ns, auto, manual
    for proc in (manual, auto, ns):
        proc.stop()


@pytest.fixture(scope="module")
def strict_cluster(tmp_path_factory):
    """No broker of this cluster creates topics on a first send."""
    root = tmp_path_factory.mktemp("strict")
    ns = Namesrv(root / "namesrv").start()
    strict = Broker(root / "strict", name="broker-strict", namesrv_addr=ns.addr, autoCreateTopicEnable=False).start()
    yield ns, strict
    strict.stop()
    ns.stop()


async def routed(admin: AdminClient, topic: str):
    try:
        return await admin.topic_route_raw(topic)
    except NoRouteError:
        return None


async def test_a_first_send_creates_the_topic_from_tbw102_registers_it_and_the_message_is_consumable(auto_cluster):
    ns, auto, _manual = auto_cluster
    topic = unique("T_new")
    async with AdminClient(ns.addr) as admin:
        assert await routed(admin, topic) is None
        async with Producer(unique("P"), ns.addr) as producer:
            result = await producer.send(Message(topic, b"created on its first send"))
            stats = producer.stats
        assert result.status is SendStatus.SEND_OK
        # TBW102's route holds broker-auto only (broker-manual registers no TBW102), capped at 4 queues: one request,
        # no refusal from broker-manual and no retry
        assert result.message_queue.broker_name == "broker-auto" and 0 <= result.message_queue.queue_id < 4
        assert (stats.rpcs, stats.retries) == (1, 0)

        route = await wait_for(lambda: routed(admin, topic), 10, f"the nameserver to route {topic}")
        # created with min(defaultTopicQueueNums 4, TBW102's 8) queues, TBW102's perm without INHERIT
        assert route["queueDatas"] == [
            {"brokerName": "broker-auto", "perm": 6, "readQueueNums": 4, "writeQueueNums": 4, "topicSysFlag": 0}
        ]
        configs = (await admin.all_topic_configs(auto.addr)).topic_configs
        created = next(c for c in configs if c.topic_name == topic)
        assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (4, 4, 6)

    async with PullConsumer(unique("G"), ns.addr) as puller:
        pulled = await puller.pull(result.message_queue, result.queue_offset)
    assert [m.body for m in pulled.messages] == [b"created on its first send"]


async def test_admin_sends_to_a_new_topic_by_the_tbw102_route_as_mqctl_send_message_does(auto_cluster):
    ns, auto, _manual = auto_cluster
    topic = unique("T_admin")
    async with AdminClient(ns.addr) as admin:
        route = await admin.topic_route_for_send(topic)
        assert route.is_default
        assert [(q["brokerName"], q["writeQueueNums"], q["readQueueNums"]) for q in route.data["queueDatas"]] == [
            ("broker-auto", 4, 4)
        ]
        (broker_data,) = route.data["brokerDatas"]
        assert broker_data["brokerAddrs"][0] == auto.addr
        result = await admin.send_message(auto.addr, MessageQueue(topic, "broker-auto", 3), Message(topic, b"x"))
        assert result.status is SendStatus.SEND_OK and result.message_queue.queue_id == 3

        await wait_for(lambda: routed(admin, topic), 10, f"the nameserver to route {topic}")
        again = await admin.topic_route_for_send(topic)
        assert not again.is_default and again.data["queueDatas"][0]["writeQueueNums"] == 4


async def test_without_auto_creation_the_broker_refuses_naming_the_key_and_the_command(strict_cluster):
    ns, strict = strict_cluster
    topic = unique("T_refused")
    async with Producer(unique("P"), ns.addr, send_timeout_s=3.0) as producer:
        with pytest.raises(BrokerError) as info:
            await producer.send(Message(topic, b"x"))
    err = info.value
    assert err.code == ResponseCode.TOPIC_NOT_EXIST and err.broker_addr == strict.addr
    assert f"mqctl updateTopic -t {topic} -c DefaultCluster" in str(err)
    assert "autoCreateTopicEnable=true" in str(err)

    async with AdminClient(ns.addr) as admin:
        with pytest.raises(NoRouteError) as no_route:
            await admin.topic_route_for_send(topic)
        assert await routed(admin, topic) is None  # nothing was created
    text = str(no_route.value)
    assert "TBW102" in text and "autoCreateTopicEnable=false" in text and f"updateTopic -t {topic}" in text
