"""F7 / N1 (reliability.md §5.1, §5.2): the SYNC_MASTER never answers SEND_OK while its slave cannot ack.

`mqctl pause slave -b broker-a` freezes broker-a-s (sockets stay open, nothing answers); `mqctl partition broker-a
broker-a-s` cuts the network between them (without NET_ADMIN in the containers mqctl disconnects broker-a-s from
the compose network). While the fault holds, every send to broker-a is stored on the master and answered
FLUSH_SLAVE_TIMEOUT (no ack within slaveTimeout, 3 s) or SLAVE_NOT_AVAILABLE (no slave connected), never
SEND_OK. After `mqctl unpause` / `mqctl heal` the slave catches up and sends are SEND_OK again. The topic lives on
broker-a only, so every send goes to the SYNC_MASTER; a push consumer checks acked ⊆ consumed at the end.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from client import SendStatus
from harness.waiting import async_wait_until
from tests.system.harness import (
    WEAK,
    BackgroundProducer,
    RecordingConsumer,
    amqctl,
    await_caught_up,
    await_whole,
    check,
    drain,
    unique,
)

RATE = 40  # messages/s to broker-a
BASELINE_S = 2.0
FAULT_S = 8.0  # > slaveTimeout (3 s): several sends time out while the fault holds
RECOVERY_TIMEOUT_S = 60.0  # the slave reconnects (its HA client retries; both ends expire silent links in 20 s)
SETTLE_S = 0.5  # answers of sends the slave acked just before the fault may still be on their way


FAULTS = {
    "pause": (("pause", "slave", "-b", "broker-a"), ("unpause", "slave", "-b", "broker-a")),
    "partition": (("partition", "broker-a", "broker-a-s"), ("heal",)),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_sync_master_answers_weak_statuses_while_its_slave_cannot_ack(whole, topics, fault, tmp_path):
    cluster = whole
    topic = topics["only_a"]
    inject, undo = FAULTS[fault]
    env = {"XDG_STATE_HOME": str(tmp_path)}  # mqctl's partition records live here
    # send_timeout_s above slaveTimeout: the broker's FLUSH_SLAVE_TIMEOUT answer must reach the producer
    producer = BackgroundProducer(topic, rate=RATE, send_timeout_s=15.0, max_inflight_per_queue=4)
    consumer = RecordingConsumer(unique(f"sys_{fault}_group"), topic)
    faulted = False
    notes: list[str] = []
    try:
        await consumer.start()
        await producer.start()
        await asyncio.sleep(BASELINE_S)  # paces the load: a baseline of sends before the fault
        baseline = producer.status_counts([s for s in producer.sends.values() if not s.pending])
        assert baseline.get("SEND_OK") and set(baseline) == {"SEND_OK"}, f"before the {fault}: {baseline}"

        await amqctl(*inject, project=cluster.project, env=env)
        faulted = True
        t_fault = time.monotonic()
        await asyncio.sleep(FAULT_S)  # the fault window (the schedule), not a wait for a state
        t_undo = time.monotonic()
        await amqctl(*undo, project=cluster.project, env=env)
        faulted = False
        t_healed = time.monotonic()

        def ok_again() -> bool:
            return any(s.status is SendStatus.SEND_OK for s in producer.sends.values() if s.invoked >= t_healed)

        await async_wait_until(ok_again, RECOVERY_TIMEOUT_S, lambda: (
            f"no SEND_OK after `mqctl {' '.join(undo)}`: "
            f"{producer.status_counts([s for s in producer.sends.values() if s.invoked >= t_healed])}"), 0.2)
        recovery_s = (
            min(s.answered for s in producer.sends.values() if s.invoked >= t_healed and s.status is SendStatus.SEND_OK)
            - t_healed
        )
        notes.append(f"first SEND_OK {recovery_s:.1f}s after `mqctl {' '.join(undo)}`")
        await producer.stop()
        await drain(producer, consumer.deliveries, 30, what=f"after the {fault}: ")
        end = await await_caught_up("broker-a")
        notes.append(f"broker-a-s caught up to {end}")
    finally:
        await producer.stop()
        await consumer.stop()
        if faulted:
            await amqctl(*undo, project=cluster.project, env=env)
        await await_whole(60)  # the next test starts on a whole cluster

    # Answered while the fault held: sent after it began, or answered once in-flight acks had time to arrive.
    during = [
        s
        for s in producer.sends.values()
        if not s.pending and s.answered <= t_undo and (s.invoked >= t_fault or s.answered >= t_fault + SETTLE_S)
    ]
    ok_during = sorted(s.id for s in during if s.status is SendStatus.SEND_OK)
    weak_during = [s for s in during if s.status in WEAK]
    verdict = check(producer.sends, consumer.deliveries, producer.prefix)
    report = (
        f"{fault}: answered during the fault {producer.status_counts(during)}; overall "
        f"{producer.status_counts()}; {verdict.summary()}; {'; '.join(notes)}"
    )
    print(f"\n{report}")
    assert not ok_during, f"SEND_OK while broker-a's slave could not ack, e.g. {ok_during[:10]}: {report}"
    assert weak_during, f"no FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE answer during the {fault}: {report}"
    assert all(s.status in WEAK for s in during), f"sends failed outright during the {fault}: {report}"
    assert not verdict.lost and not verdict.unexpected, report
