"""Registration with a real nameserver: topics appear in routes at once, a slave learns its master, a stopped
or killed broker leaves the route without waiting for the 120 s expiry."""

from __future__ import annotations

import pytest

from remoting.codes import ResponseCode
from remoting.pb import namesrv_pb2
from tests.integration.broker.rpc import BrokerClient, make_broker, message, namesrv_stub
from tests.support.procs import Namesrv
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration


async def route(namesrv, topic: str) -> namesrv_pb2.GetRouteInfoResponse:
    channel, stub = namesrv_stub(namesrv.addr)
    try:
        return await stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=5)
    finally:
        await channel.close()


async def test_a_topic_created_by_admin_is_in_the_nameserver_route_without_waiting_for_the_period(
    client, namesrv, master
):
    assert (await client.create_topic("RoutedTopic", queues=3)).code == 0

    async def routed():
        r = await route(namesrv, "RoutedTopic")
        return r if r.code == ResponseCode.SUCCESS else None

    r = await async_wait_until(routed, 3, "RoutedTopic never appeared in the route")
    [qd] = r.route.queue_datas
    assert (qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm) == ("broker-a", 3, 3, 6)
    [bd] = r.route.broker_datas
    assert dict(bd.broker_addrs) == {0: master.addr}


async def test_a_slave_learns_its_masters_addresses_from_the_registration_reply(tmp_path, namesrv, master):
    slave = make_broker(tmp_path, name="broker-a", namesrv_addr=namesrv.addr, role="SLAVE", broker_id=1).start()
    try:
        c = BrokerClient(slave.addr)
        info = await c.runtime_info()
        assert info["masterAddr"] == master.addr
        assert info["masterHaAddr"] == master.ha_addr
        await c.close()
        r = await route(namesrv, "SCHEDULE_TOPIC_XXXX")
        [bd] = [b for b in r.route.broker_datas if b.broker_name == "broker-a"]
        assert dict(bd.broker_addrs) == {0: master.addr, 1: slave.addr}
    finally:
        slave.stop()


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_a_broker_that_goes_away_leaves_the_route_at_once(tmp_path, namesrv, how):
    broker = make_broker(tmp_path, name=f"broker-gone-{how}", namesrv_addr=namesrv.addr).start()
    c = BrokerClient(broker.addr)
    topic = f"GoneTopic{how}"
    assert (await c.create_topic(topic, queues=1)).code == 0
    await c.close()

    async def present():
        return (await route(namesrv, topic)).code == ResponseCode.SUCCESS

    await async_wait_until(present, 3, f"{topic} never appeared in the route")
    broker.stop() if how == "stop" else broker.kill()

    async def gone():
        return (await route(namesrv, topic)).code == ResponseCode.TOPIC_NOT_EXIST

    await async_wait_until(gone, 3, f"{topic} still routed after the broker went away ({how})")


async def test_a_topic_auto_created_by_a_send_is_routed_at_once(client, namesrv):
    assert (await client.send("AutoRoutedTopic", 0, [message(b"x")], default_topic_queue_nums=2)).code == 0

    async def routed():
        r = await route(namesrv, "AutoRoutedTopic")
        return r.code == ResponseCode.SUCCESS and r.route.queue_datas[0].write_queue_nums == 2

    await async_wait_until(routed, 3, "AutoRoutedTopic never appeared in the route")


async def test_a_restarted_nameserver_relearns_the_broker_through_the_keep_alive_stream(tmp_path):
    ns = Namesrv(tmp_path / "ns").start()
    broker = make_broker(tmp_path / "b", name="broker-k", namesrv_addr=ns.addr).start()
    try:
        c = BrokerClient(broker.addr)
        assert (await c.create_topic("KeepAliveTopic", queues=1)).code == 0
        await c.close()
        ns.stop()
        ns.start()  # same port, empty route table; the next periodic registration is 30 s away

        async def routed():
            return (await route(ns, "KeepAliveTopic")).code == ResponseCode.SUCCESS

        await async_wait_until(routed, 10, "the broker did not re-register after the nameserver restart")
    finally:
        broker.stop()
        ns.stop()
