"""Controller mode with real processes: one etcd, a nameserver running the controller, a broker group of three
controller-mode brokers and the SDK producer. The first broker becomes master, the others slaves; SIGKILL of the
master elects a SyncStateSet member, which takes SYNC sends (SEND_OK) again with every acknowledged message still
there; the killed broker, restarted, rejoins as a slave after cutting the tail no member ever acknowledged."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import AdminClient, Message, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus
from harness.controller_mode import commitlog_bytes, controller_broker, log_differences, replica_info
from harness.controller_mode import sync_state_set_is as harness_sync_state_set_is
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "FailoverTopic"
GROUP = "broker-a"


def sync_state_set_is(ns, members: set[int]):
    return harness_sync_state_set_is(ns, GROUP, members)


async def drain(ns, addr_name: str, queues: int) -> set[bytes]:
    consumer = await PullConsumer("failover-check", ns.addr).start()
    bodies: set[bytes] = set()
    try:
        for q in range(queues):
            offset = 0
            while True:
                result = await consumer.pull(MessageQueue(TOPIC, addr_name, q), offset, max_nums=32, timeout_s=5)
                if result.status is not PullStatus.FOUND:
                    break
                bodies.update(m.body for m in result.messages)
                offset = result.next_begin_offset
    finally:
        await consumer.stop()
    return bodies


async def test_kill_master_elects_a_member_and_the_old_master_rejoins_truncated(tmp_path, cns):
    # a long haMaxTimeSlaveNotCatchup keeps paused slaves in the SyncStateSet, so they stay electable
    brokers = [controller_broker(tmp_path, cns, GROUP, i, haMaxTimeSlaveNotCatchup=60_000,
                                 maxMessageSize=1024 * 1024) for i in (1, 2, 3)]
    admin = await AdminClient(cns.addr).start()
    producer = await Producer("failover-producer", cns.addr, send_timeout_s=8.0).start()
    try:
        first = brokers[0].start()
        info = await replica_info(cns, GROUP)
        assert info.master_broker_id == 1 and info.master_address == first.addr and info.master_epoch == 1
        assert "role=SYNC_MASTER" in first.output()
        for b in brokers[1:]:
            b.start()
            assert "role=SLAVE" in b.output()
        await async_wait_until(sync_state_set_is(cns, {1, 2, 3}), 20, "the slaves join the SyncStateSet")
        await admin.update_topic(first.addr, TOPIC, read_queue_nums=2, write_queue_nums=2)

        acked: set[bytes] = set()
        for i in range(100):
            body = f"acked-{i}".encode()
            result = await producer.send(Message(TOPIC, body))
            assert result.status is SendStatus.SEND_OK, result
            acked.add(body)

        # an unconfirmed tail: with both slaves frozen the master stores sends but cannot confirm them; more than
        # the frozen slaves' socket buffers hold, so part of it exists on the master alone
        for b in brokers[1:]:
            b.pause()
        big = b"u" * 600_000
        results = await asyncio.gather(*(producer.send(Message(TOPIC, b"unconfirmed-%d-" % i + big))
                                         for i in range(40)), return_exceptions=True)
        assert not any(getattr(r, "status", None) is SendStatus.SEND_OK for r in results), results
        first.kill()
        killed_at = time.monotonic()
        for b in brokers[1:]:
            b.resume()

        async def send_ok() -> bool:
            try:
                result = await producer.send(Message(TOPIC, b"after-kill"))
            except Exception:  # noqa: BLE001 - the route still names the dead master, or the new one is switching
                return False
            return result.status is SendStatus.SEND_OK

        await async_wait_until(send_ok, 30, "a SEND_OK from the new master", 0.05)
        took = time.monotonic() - killed_at
        acked.add(b"after-kill")
        info = await replica_info(cns, GROUP)
        assert info.master_broker_id in (2, 3) and info.master_epoch >= 2, info
        new_master = brokers[info.master_broker_id - 1]
        route = await admin.topic_route(TOPIC)
        addrs = route.broker_addrs[GROUP]
        assert addrs.get(0) == new_master.addr, (addrs, took)

        # every acknowledged message is on the new master; nothing of the unconfirmed tail was promised
        bodies = await drain(cns, GROUP, 2)
        assert acked <= bodies, sorted(acked - bodies)[:10]

        # the old master restarts, learns it is a slave, cuts the tail the group never confirmed, streams
        first.start()
        await async_wait_until(sync_state_set_is(cns, {1, 2, 3}), 30, "the old master rejoins the SyncStateSet")
        assert "cutting the log" in first.output()
        for i in range(20):
            assert (await producer.send(Message(TOPIC, f"later-{i}".encode()))).status is SendStatus.SEND_OK
        others = [b for b in brokers if b is not new_master]

        async def identical() -> bool:
            want = commitlog_bytes(new_master)
            return all(commitlog_bytes(b) == want for b in others)

        await async_wait_until(identical, 20, lambda: log_differences(new_master, others))
    finally:
        await producer.stop()
        await admin.stop()
        for b in brokers:
            b.resume()
            b.stop()
