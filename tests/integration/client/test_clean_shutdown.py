"""The SDK shuts down cleanly through a master's death (issue 12 item 11): a producer, a push consumer and a pull
consumer keep working while one master is SIGKILLed (or SIGSTOPped and left stopped), then stop; afterwards none of
their tasks is left pending and nothing was logged at ERROR, in particular no asyncio "Task was destroyed but it is
pending" and no "aclose(): asynchronous generator is already running".

The scenario runs on an event loop of its own that is closed the plain way (``run_until_complete`` then ``close``,
no cancelling of what is left), as an application embedding the SDK may do, and garbage is collected before the
log is read: a task the SDK left behind would be reported then.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from client import AdminClient, ConsumeStatus, Message, Producer, PullConsumer, PushConsumer
from tests.integration.client.conftest import unique
from harness.procs import Broker
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def scenario(namesrv_addr: str, a: Broker, b: Broker, fault: str) -> None:
    topic, group = unique("T_shutdown"), unique("G_shutdown")
    admin = AdminClient(namesrv_addr)
    await admin.start()
    try:
        for broker in (a, b):
            await admin.update_topic(broker.addr, topic, read_queue_nums=2, write_queue_nums=2)

        async def both_routed() -> bool:
            return {mq.broker_name for mq in (await admin.topic_route(topic)).publish_queues} == {a.name, b.name}

        await async_wait_until(both_routed, 20, "both groups in the route", 0.2)
    finally:
        await admin.stop()

    consumed: list = []

    async def listener(msgs) -> ConsumeStatus:
        consumed.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    push = PushConsumer(group, namesrv_addr, suspend_ms=1000, pull_retry_delay_s=0.2, request_timeout_s=2.0)
    push.subscribe(topic)
    push.register_message_listener(listener)
    producer = Producer(unique("P"), namesrv_addr, send_timeout_s=4.0)
    puller = PullConsumer(unique("G_pull"), namesrv_addr, request_timeout_s=2.0)
    await push.start()
    await producer.start()
    await puller.start()
    queues = await puller.fetch_subscribe_queues(topic)
    sent_after_fault = 0

    async def send_round() -> int:
        results = await asyncio.gather(*(producer.send(Message(topic, b"m")) for _ in range(40)),
                                       return_exceptions=True)
        return sum(1 for r in results if not isinstance(r, BaseException))

    async def pull_round() -> None:
        await asyncio.gather(*(puller.pull(mq, 0, 16) for mq in queues), return_exceptions=True)

    await send_round()
    await async_wait_until(lambda: len(consumed) >= 40, 20, "the push consumer to take the first 40 messages", 0.1)
    if fault == "kill":
        a.kill()
    else:
        a.pause()
    try:
        async def the_other_group_takes_sends() -> bool:
            nonlocal sent_after_fault
            sent_after_fault += await send_round()
            await pull_round()
            return sent_after_fault >= 80

        await async_wait_until(the_other_group_takes_sends, 60, "80 sends after the fault", 0.1)
        await puller.stop()
        await producer.stop()
        await push.stop()
    finally:
        a.resume()


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_the_sdk_stops_cleanly_after_a_master_dies(tmp_path, namesrv, fault):
    a = Broker(tmp_path / "a", name="broker-sa", namesrv_addr=namesrv.addr, role="SYNC_MASTER").start()
    a_slave = Broker(tmp_path / "as", name="broker-sa", namesrv_addr=namesrv.addr, role="SLAVE", broker_id=1,
                     haMasterAddress=a.ha_addr).start()
    b = Broker(tmp_path / "b", name="broker-sb", namesrv_addr=namesrv.addr).start()
    handler = Records()
    root = logging.getLogger()
    root.addHandler(handler)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(scenario(namesrv.addr, a, b, fault))
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        gc.collect()
    finally:
        root.removeHandler(handler)
        if not loop.is_closed():
            loop.close()
        for broker in (b, a_slave, a):
            broker.stop()
    assert not left, "SDK tasks still pending after stop(): " + ", ".join(t.get_name() for t in left)
    errors = [r for r in handler.records if r.levelno >= logging.ERROR]
    assert not errors, "\n".join(f"{r.name}: {r.getMessage()}" for r in errors)
    texts = " ".join(r.getMessage() for r in handler.records)
    assert "Task was destroyed" not in texts and "aclose()" not in texts
