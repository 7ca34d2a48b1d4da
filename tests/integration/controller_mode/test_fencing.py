"""Fencing with real processes: a controller-mode master that the controller no longer confirms stops answering
SEND_OK (before the controller could take it for dead), and a frozen master that was replaced answers no SEND_OK
when it wakes up; it rejoins as a slave with the new master's log."""

from __future__ import annotations

import asyncio

import pytest

from client import AdminClient, Message, Producer, SendStatus
from harness.controller_mode import (
    commitlog_bytes,
    controller_broker,
    log_differences,
    replica_info,
    sync_state_set_is,
)
from harness.waiting import async_wait_until
from remoting.codes import ResponseCode
from tests.integration.broker.rpc import BrokerClient, message

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "FencedTopic"
GROUP = "broker-f"


async def test_a_master_the_controller_stops_confirming_fences_itself_and_recovers(tmp_path, cns):
    master = controller_broker(tmp_path, cns, GROUP, 1).start()
    client = BrokerClient(master.addr)
    try:
        assert (await client.create_topic(TOPIC, queues=1)).code == ResponseCode.SUCCESS
        sent = await client.send(TOPIC, 0, [message(b"before")])
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        cns.pause()  # the controller (in the nameserver) stops answering: no heartbeat is confirmed any more

        async def fenced() -> bool:
            answer = await client.send(TOPIC, 0, [message(b"while-paused")])
            return answer.code == ResponseCode.SLAVE_NOT_AVAILABLE and "fenced" in answer.remark

        await async_wait_until(fenced, 20, "the master stops answering SEND_OK", 0.1)
        cns.resume()

        async def serving() -> bool:
            return (await client.send(TOPIC, 0, [message(b"after")])).code == ResponseCode.SUCCESS

        await async_wait_until(serving, 30, "SEND_OK again once the controller confirms the master", 0.1)
    finally:
        cns.resume()
        await client.close()
        master.stop()


async def test_a_frozen_master_is_replaced_answers_no_send_ok_and_rejoins_as_a_slave(tmp_path, cns):
    brokers = [controller_broker(tmp_path, cns, GROUP, i) for i in (1, 2, 3)]
    admin = await AdminClient(cns.addr).start()
    producer = await Producer("fencing-producer", cns.addr, send_timeout_s=8.0).start()
    old = brokers[0]
    client = BrokerClient(old.addr)
    try:
        for b in brokers:
            b.start()
        await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2, 3}), 20, "the slaves join the SyncStateSet")
        await admin.update_topic(old.addr, TOPIC, read_queue_nums=1, write_queue_nums=1)
        assert (await client.send(TOPIC, 0, [message(b"first")])).code == ResponseCode.SUCCESS

        old.pause()  # silent: its heartbeats stop, the controller elects another member after the timeout

        async def replaced() -> bool:
            return (await replica_info(cns, GROUP)).master_broker_id in (2, 3)

        await async_wait_until(replaced, 20, "a new master elected while the old one is frozen", 0.1)

        async def send_ok() -> bool:
            try:
                return (await producer.send(Message(TOPIC, b"to-new"))).status is SendStatus.SEND_OK
            except Exception:  # noqa: BLE001 - the route may still name the frozen master
                return False

        await async_wait_until(send_ok, 30, "a SEND_OK from the new master", 0.1)
        # a send that reaches the old master while it is frozen is served when it wakes: never SEND_OK
        stale = asyncio.ensure_future(client.send(TOPIC, 0, [message(b"to-old")]))
        await asyncio.sleep(0.3)
        old.resume()
        try:
            answer = await stale
            assert answer.code != ResponseCode.SUCCESS, "the replaced master answered SEND_OK"
        except Exception:  # noqa: BLE001 - or its connection closed when it switched role: not SEND_OK either
            pass

        await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2, 3}), 30, "the old master rejoins as a slave")
        info = await replica_info(cns, GROUP)
        new_master = brokers[info.master_broker_id - 1]
        others = [b for b in brokers if b is not new_master]
        assert (await producer.send(Message(TOPIC, b"later"))).status is SendStatus.SEND_OK

        async def identical() -> bool:
            want = commitlog_bytes(new_master)
            return all(commitlog_bytes(b) == want for b in others)

        await async_wait_until(identical, 20, lambda: log_differences(new_master, others))
    finally:
        await client.close()
        await producer.stop()
        await admin.stop()
        for b in brokers:
            b.resume()
            b.stop()
