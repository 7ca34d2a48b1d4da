"""A broker that stops (SIGTERM) or crashes (SIGKILL) comes back with its messages, queue offsets and consumer
offsets (kafkatest's clean_bounce / hard_bounce, for one broker)."""

from __future__ import annotations

import asyncio
import signal

import pytest

from remoting.codes import ResponseCode
from tests.integration.broker.rpc import FLAG_SUBSCRIPTION, FLAG_SUSPEND, BrokerClient, make_broker, message
from harness.waiting import async_wait_until, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("bounce", ["clean", "hard"])
async def test_a_bounced_broker_keeps_messages_and_consumer_offsets(tmp_path, namesrv, bounce):
    broker = make_broker(tmp_path, name="broker-r", namesrv_addr=namesrv.addr, flushConsumerOffsetInterval=200).start()
    try:
        c = BrokerClient(broker.addr)
        bodies = [b"r-%d" % i for i in range(300)]
        for start in range(0, 300, 100):
            resp = await c.send("RestartTopic", 0, [message(b) for b in bodies[start : start + 100]])
            assert resp.code == ResponseCode.SUCCESS
        assert (await c.heartbeat("c-restart", consumers={"g-restart": {"RestartTopic": "*"}})).code == 0
        assert (await c.commit_offset("g-restart", "RestartTopic", 0, 120)).code == 0
        if bounce == "hard":
            # Let the 200 ms offset flush run; a crash loses at most the commits since the last flush.
            offsets_file = broker.store_dir / "config" / "consumerOffset.json"
            wait_until(lambda: "RestartTopic@g-restart" in offsets_file.read_text(), 5, "offsets were not flushed")
        await c.close()
        if bounce == "clean":
            assert broker.stop() == 0
        else:
            broker.kill()
        broker.start()
        c = BrokerClient(broker.addr)
        got = await c.pull_all("g-restart", "RestartTopic", 0, max_nums=64)
        assert [m.body for m in got] == bodies
        assert await c.query_offset("g-restart", "RestartTopic", 0) == (ResponseCode.SUCCESS, 120)
        resp = await c.send("RestartTopic", 0, [message(b"after")])
        assert (resp.code, resp.queue_offset) == (ResponseCode.SUCCESS, 300)
        await c.close()
    finally:
        broker.stop()


async def test_a_delayed_message_parked_before_a_restart_is_still_delivered_after_it(tmp_path, namesrv):
    broker = make_broker(tmp_path, name="broker-d", namesrv_addr=namesrv.addr, messageDelayLevel="1s 2s").start()
    try:
        c = BrokerClient(broker.addr)
        assert (await c.send("DelayRestartTopic", 0, [message(b"parked", DELAY="2")])).code == ResponseCode.SUCCESS
        await c.close()
        assert broker.stop() == 0
        broker.start()
        c = BrokerClient(broker.addr)

        async def delivered():
            return (await c.pull("g-dr", "DelayRestartTopic", 0, 0)).messages

        [msg] = await async_wait_until(delivered, 10, "the parked message was not delivered after the restart")
        assert msg.body == b"parked"
        await c.close()
    finally:
        broker.stop()


async def test_sigterm_answers_held_pulls_at_once_and_exits_cleanly(tmp_path, namesrv):
    broker = make_broker(tmp_path, name="broker-h", namesrv_addr=namesrv.addr).start()
    c = BrokerClient(broker.addr)
    await c.create_topic("HeldTopic", queues=1)
    held = asyncio.ensure_future(
        c.pull("g-held", "HeldTopic", 0, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION, suspend_ms=15_000)
    )

    async def parked() -> bool:
        return (await c.runtime_info())["heldPullRequests"] == "1"

    await async_wait_until(parked, 5, "the pull was never parked")
    broker.proc.send_signal(signal.SIGTERM)
    # Answered, not cut off: a pull still held when the remoting server's grace ran out would see its connection
    # closed instead (and a 15 s hold outlasts that grace).
    got = await held
    assert got.code == ResponseCode.PULL_NOT_FOUND
    assert await asyncio.to_thread(broker.proc.wait, 30) == 0
    await c.close()
