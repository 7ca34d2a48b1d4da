"""A send to a SYNC_MASTER whose slave is paused (SIGSTOP) reaches the application as FLUSH_SLAVE_TIMEOUT, not as a
RequestTimeout (issue 12 item 2).

The SDK's requests carry the time left until its send timeout (pyrmq's ``timeoutMillis`` field) and the broker
answers its status a margin before then; the SDK's default send timeout (5 s) leaves room for the broker's whole
3 s slave wait. A request without the field (a RocketMQ client) still gets the full slaveTimeout.
"""

from __future__ import annotations

import pytest

from client import Message, Producer, SendStatus
from remoting.codes import ResponseCode
from tests.brokers import master_and_slave
from tests.integration.broker.rpc import BrokerClient, message
from tests.integration.client.conftest import create_topic, unique, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def sync_group(tmp_path, namesrv):
    with master_and_slave(tmp_path, namesrv.addr, "broker-dl", "SYNC_MASTER") as pair:
        yield pair


async def test_a_paused_slave_shows_as_flush_slave_timeout_not_as_a_request_timeout(namesrv, admin, sync_group):
    master, slave = sync_group
    topic = unique("T_deadline")
    await create_topic(admin, master, topic, queues=1)
    async with Producer(unique("P"), namesrv.addr) as producer:  # the default send timeout
        async def replicated() -> bool:
            return (await producer.send(Message(topic, b"before"))).status is SendStatus.SEND_OK

        await wait_for(replicated, 30, "a SEND_OK: the slave connected and acknowledging", interval_s=0.2)
        slave.pause()
        try:
            paused = await producer.send(Message(topic, b"while the slave is paused"))
            assert paused.status is SendStatus.FLUSH_SLAVE_TIMEOUT and paused.offset_msg_id
            async with Producer(unique("P"), namesrv.addr, send_timeout_s=2.0) as hurried:  # less than slaveTimeout
                assert (await hurried.send(Message(topic, b"hurried"))).status is SendStatus.FLUSH_SLAVE_TIMEOUT
            rocketmq_like = BrokerClient(master.addr)  # sends no timeoutMillis: the broker waits slaveTimeout
            try:
                resp = await rocketmq_like.send(topic, 0, [message(b"from a RocketMQ client")])
            finally:
                await rocketmq_like.close()
            assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and "within slaveTimeout=3000 ms" in resp.remark
        finally:
            slave.resume()
