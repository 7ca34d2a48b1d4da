"""Controller mode with real processes: one etcd, a nameserver running the controller, a broker group of three
controller-mode brokers and the SDK producer. The first broker becomes master, the others slaves; SIGKILL of the
master elects a SyncStateSet member, which takes SYNC sends (SEND_OK) again with every acknowledged message still
there; the killed broker, restarted, rejoins as a slave after cutting the tail no member ever acknowledged."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import AdminClient, Message, Producer, SendStatus
from harness.checker import Mode, Outcome, Read, Send, check
from harness.controller_mode import commitlog_bytes, controller_broker, log_differences, replica_info
from harness.controller_mode import drain as harness_drain
from harness.controller_mode import sync_state_set_is as harness_sync_state_set_is
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "FailoverTopic"
GROUP = "broker-a"


def sync_state_set_is(ns, members: set[int]):
    return harness_sync_state_set_is(ns, GROUP, members)


class History:
    """Every send with its outcome, for ``harness.checker`` (ids are the body up to the first '|')."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.sends: list[Send] = []

    async def send(self, ident: str, padding: bytes = b"") -> SendStatus | None:
        seq = len(self.sends)
        try:
            result = await self.producer.send(Message(TOPIC, ident.encode() + b"|" + padding))
        except Exception as exc:  # noqa: BLE001 - no answer: it may or may not be stored
            self.sends.append(Send(ident, "w", seq, Outcome.UNKNOWN, detail=str(exc)[:80]))
            return None
        ok = result.status is SendStatus.SEND_OK
        self.sends.append(Send(ident, "w", seq, Outcome.ACKED if ok else Outcome.WEAK, detail=result.status.name))
        return result.status


async def drain(ns, queues: int) -> list[Read]:
    return await harness_drain(ns.addr, TOPIC, GROUP, queues)


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

        history = History(producer)
        for i in range(100):
            assert await history.send(f"before-{i}") is SendStatus.SEND_OK

        # an unconfirmed tail: with both slaves frozen the master stores sends but cannot confirm them; more than
        # the frozen slaves' socket buffers hold, so part of it exists on the master alone
        for b in brokers[1:]:
            b.pause()
        statuses = await asyncio.gather(*(history.send(f"unconfirmed-{i}", b"u" * 600_000) for i in range(40)))
        assert SendStatus.SEND_OK not in statuses, statuses
        first.kill()
        killed_at = time.monotonic()
        for b in brokers[1:]:
            b.resume()

        async def send_ok() -> bool:
            return await history.send(f"after-kill-{len(history.sends)}") is SendStatus.SEND_OK

        await async_wait_until(send_ok, 30, "a SEND_OK from the new master", 0.05)
        took = time.monotonic() - killed_at
        info = await replica_info(cns, GROUP)
        assert info.master_broker_id in (2, 3) and info.master_epoch >= 2, info
        new_master = brokers[info.master_broker_id - 1]
        route = await admin.topic_route(TOPIC)
        addrs = route.broker_addrs[GROUP]
        assert addrs.get(0) == new_master.addr, (addrs, took)

        # the old master restarts, learns it is a slave, cuts the tail the group never confirmed, streams
        first.start()
        await async_wait_until(sync_state_set_is(cns, {1, 2, 3}), 30, "the old master rejoins the SyncStateSet")
        assert "cutting the log" in first.output()
        for i in range(20):
            assert await history.send(f"later-{i}") is SendStatus.SEND_OK
        others = [b for b in brokers if b is not new_master]

        async def identical() -> bool:
            want = commitlog_bytes(new_master)
            return all(commitlog_bytes(b) == want for b in others)

        await async_wait_until(identical, 20, lambda: log_differences(new_master, others))
        # the fault checker on the whole history: every SEND_OK is consumable from the new master, nothing read
        # that was not sent, one id per queue offset
        report = check(history.sends, await drain(cns, 2))
        assert not report.problems(Mode.SYNC), (report.problems(Mode.SYNC), report.figures())
        assert report.acked >= 121 and report.lost == []
    finally:
        await producer.stop()
        await admin.stop()
        for b in brokers:
            b.resume()
            b.stop()
