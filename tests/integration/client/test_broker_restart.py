"""A broker restart keeps committed consumer offsets: a consumer of the same group resumes where it committed."""

from __future__ import annotations

import pytest

from client import Message, Producer, SendStatus
from tests.integration.client.conftest import Recorder, create_topic, push_consumer, unique, wait_for
from harness.procs import Broker

pytestmark = pytest.mark.integration


async def test_consumer_resumes_from_its_committed_offset_after_a_broker_restart(tmp_path, namesrv, admin):
    broker = Broker(tmp_path / "b", name="broker-r", namesrv_addr=namesrv.addr).start()
    try:
        topic, group = unique("T_restart"), unique("G_restart")
        await create_topic(admin, broker, topic, queues=2)
        async with Producer(unique("P"), namesrv.addr, send_timeout_s=5.0) as producer:
            for i in range(100):
                await producer.send(Message(topic, f"before-{i}".encode()))
            first = Recorder()
            async with push_consumer(namesrv, group, topic, first, persist_interval_s=1.0):
                await wait_for(lambda: first.unique_count() >= 100, 20, "the first 100 messages")
            # stop() committed the offsets; the broker persists them on its graceful stop.
            broker.stop()
            broker.start()

            result = await wait_for(lambda: producer.send(Message(topic, b"after-0")), 20,
                                    "a send to succeed after the restart", interval_s=0.5)
            assert result.status is SendStatus.SEND_OK
            for i in range(1, 50):
                await producer.send(Message(topic, f"after-{i}".encode()))
        second = Recorder()
        async with push_consumer(namesrv, group, topic, second, persist_interval_s=1.0):
            await wait_for(lambda: second.unique_count() >= 50, 30, "the 50 messages sent after the restart")
        assert sorted(second.bodies) == sorted(f"after-{i}".encode() for i in range(50))
    finally:
        broker.stop()
