"""F3 / O1 (reliability.md §5.1, §5.4): `mqctl kill master -b broker-a` under load, then `mqctl start master`.

kafkatest shape: a background producer records every id with its SendStatus; a push consumer group records every
delivery; the fault is injected through mqctl; after a drain the history is checked (reliability.md §8):

- while broker-a's master is down its queues keep being consumed, from its slave (the slave counts the
  messages it delivers to the group), and the group's offsets are committed there;
- nothing answered SEND_OK is lost: acked ⊆ consumed;
- the offsets committed on the slave survive the master's return (DESIGN §4: a restarting master first takes
  the offsets its slave accepted): a fresh consumer of the group resumes where the first one stopped, so no
  message consumed before the restart is delivered again beyond a small bound, and no queue offset is skipped.

The consumer is throttled below the producer's rate, so broker-a's queues hold a backlog when the master dies.
"""

from __future__ import annotations

import asyncio
import time

from client import AdminClient, SendStatus
from harness.waiting import async_wait_until
from tests.system.cluster import NAMESRV_ADDR
from tests.system.harness import (
    MASTERS,
    SLAVES,
    BackgroundProducer,
    Delivery,
    RecordingConsumer,
    amqctl,
    await_caught_up,
    await_whole,
    broker_metrics,
    check,
    drain,
    metric_sum,
    unique,
)

RATE = 200  # messages/s over both broker groups
CONSUME_DELAY_S = 0.025  # per message and worker: 2 workers ≈ 80 messages/s, so a backlog builds up
LOAD_BEFORE_KILL_S = 6.0
SLAVE_SERVED_MIN = 100  # messages broker-a-s must deliver to the group while its master is down
QUEUES = 4  # per broker group (the topics fixture)
# A consumer that stops commits exactly what it consumed; what it consumed concurrently with the stop may be
# redelivered to the next member. More than this means the committed offsets went backwards.
REDELIVERY_BOUND = 2 * QUEUES * 2


def _consumer(group: str, topic: str, name: str, deliveries: list[Delivery], delay_s: float) -> RecordingConsumer:
    return RecordingConsumer(
        group,
        topic,
        name=name,
        delay_s=delay_s,
        deliveries=deliveries,
        consume_concurrency=2,
        pull_batch_size=8,
        max_inflight_messages=64,
    )


async def _committed(admin: AdminClient, addr: str, group: str, topic: str) -> dict[int, int]:
    return {q: await admin.query_consumer_offset(addr, group, topic, q) for q in range(QUEUES)}


def _next_offsets(deliveries) -> dict[int, int]:
    """The next broker-a queue offset after the highest one delivered, per queue (0 for none)."""
    nxt = dict.fromkeys(range(QUEUES), 0)
    for d in deliveries:
        if d.broker_name == "broker-a":
            nxt[d.queue_id] = max(nxt[d.queue_id], d.queue_offset + 1)
    return nxt


async def _slave_out(cluster, group: str, topic: str) -> float:
    text = await asyncio.to_thread(broker_metrics, cluster, "broker-a-s")
    return metric_sum(text, "rocketmq_messages_out_total", topic=topic, consumer_group=group)


async def test_kill_master_consumers_move_to_the_slave_and_nothing_acked_is_lost(whole, topics):
    cluster = whole
    topic = topics["master_kill"]
    group = unique("sys_kill_group")
    deliveries: list[Delivery] = []
    notes: list[str] = []
    producer = BackgroundProducer(topic, rate=RATE)
    c1 = _consumer(group, topic, "c1", deliveries, CONSUME_DELAY_S)
    c2 = None
    admin = AdminClient(NAMESRV_ADDR, timeout_s=3.0)
    killed = False
    try:
        await admin.start()
        await c1.start()
        await producer.start()
        await asyncio.sleep(LOAD_BEFORE_KILL_S)  # paces the load: the backlog builds up before the fault
        assert producer.with_status(SendStatus.SEND_OK), f"no SEND_OK before the kill: {producer.status_counts()}"
        slave_out_before = await _slave_out(cluster, group, topic)

        # -- the fault ------------------------------------------------------------------------------------------
        await amqctl("kill", "master", "-b", "broker-a", project=cluster.project)
        killed = True
        t_kill = time.monotonic()
        backlog_a = sum(1 for s in producer.sends.values() if s.broker_name == "broker-a") - sum(
            1 for d in deliveries if d.broker_name == "broker-a"
        )

        # broker-a's queues keep being consumed, from the slave
        served = 0.0

        async def slave_served() -> bool:
            nonlocal served
            served = await _slave_out(cluster, group, topic) - slave_out_before
            return served >= SLAVE_SERVED_MIN

        await async_wait_until(slave_served, 30, lambda: (
            f"with broker-a's master down, broker-a-s delivered {served} messages to {group} "
            f"(want {SLAVE_SERVED_MIN}); broker-a backlog at the kill ≈ {backlog_a}; consumed from broker-a "
            f"since: {sum(1 for d in deliveries if d.broker_name == 'broker-a' and d.at > t_kill)}"
        ), 0.5)
        consumed_a_down = sum(1 for d in deliveries if d.broker_name == "broker-a" and d.at > t_kill)
        acked_down = [s for s in producer.sends.values() if s.invoked > t_kill + 1 and s.status is SendStatus.SEND_OK]
        notes.append(
            f"master down: broker-a-s served {served:.0f}, consumed from broker-a {consumed_a_down}, "
            f"SEND_OK meanwhile {len(acked_down)} (to {sorted({s.broker_name for s in acked_down})})"
        )

        # The first member leaves while the master is down: its last offsets go to the slave. Before it leaves, a
        # persist round lands there: the slave holds c1's offsets past what it had consumed when the master died.
        consumed_at_kill = _next_offsets(d for d in deliveries if d.at <= t_kill)
        on_slave_now: dict[int, int] = {}

        async def slave_has_c1_offsets() -> bool:
            on_slave_now.update(await _committed(admin, SLAVES["broker-a"], group, topic))
            return all(on_slave_now[q] >= consumed_at_kill[q] for q in range(QUEUES)) and any(
                on_slave_now[q] > consumed_at_kill[q] for q in range(QUEUES))

        await async_wait_until(slave_has_c1_offsets, 30, lambda: (
            f"c1's offsets committed on broker-a-s {on_slave_now}, consumed at the kill {consumed_at_kill}"), 0.25)
        await c1.stop()
        consumed_before_restart = {d.id for d in deliveries}
        on_slave = await _committed(admin, SLAVES["broker-a"], group, topic)
        c1_next = _next_offsets(deliveries)

        # -- the master returns ------------------------------------------------------------------------------
        await amqctl("start", "master", "-b", "broker-a", project=cluster.project)
        t_start = time.monotonic()
        await await_whole(60)
        killed = False
        notes.append(f"master back and replicating {time.monotonic() - t_start:.1f}s after `mqctl start`")
        on_master = await _committed(admin, MASTERS["broker-a"], group, topic)
        regress = {q: (on_master[q], on_slave[q]) for q in range(QUEUES) if on_master[q] < on_slave[q]}

        c2 = _consumer(group, topic, "c2", deliveries, 0.0)
        await c2.start()
        # load goes on over both groups until the new member has consumed from each of them since the restart
        await async_wait_until(
            lambda: {d.broker_name for d in deliveries if d.consumer == "c2" and d.at > t_start} >= set(MASTERS),
            60, lambda: f"c2 consumed from {sorted({d.broker_name for d in deliveries if d.consumer == 'c2'})}", 0.25)
        await producer.stop()
        phases = {"before kill": (0, t_kill), "master down": (t_kill, t_start), "after start": (t_start, 1e18)}
        for phase, (lo, hi) in phases.items():
            sends_a = [s for s in producer.sends.values() if lo <= s.invoked < hi and s.broker_name == "broker-a"]
            notes.append(f"broker-a sends invoked {phase}: {producer.status_counts(sends_a)}")
        await drain(producer, deliveries, 60, what=f"after the master's return ({'; '.join(notes)}): ")
        notes.append(f"broker-a-s caught up to {await await_caught_up('broker-a')}")
    finally:
        await producer.stop()
        for c in (c1, c2):
            if c is not None:
                await c.stop()
        if killed:
            await amqctl("start", "master", "-b", "broker-a", project=cluster.project)
        await admin.stop()

    verdict = check(producer.sends, deliveries, producer.prefix)
    redelivered = sorted({d.id for d in deliveries if d.consumer == "c2"} & consumed_before_restart)
    # No queue offset skipped: each queue's deliveries cover [0, its max offset) on the master.
    async with AdminClient(NAMESRV_ADDR, timeout_s=3.0) as admin2:
        skipped = {}
        for name, addr in MASTERS.items():
            for q in range(QUEUES):
                end = (await admin2.queue_offsets(addr, topic, q)).max_offset
                seen = {d.queue_offset for d in deliveries if d.broker_name == name and d.queue_id == q}
                gap = set(range(end)) - seen
                if gap:
                    skipped[f"{name}:{q}"] = (len(gap), min(gap))
    report = (
        f"{verdict.summary()} redelivered_after_restart={len(redelivered)} (bound {REDELIVERY_BOUND}) "
        f"skipped={skipped} offsets broker-a slave(at stop)={on_slave} master(after start)={on_master} "
        f"c1 next offsets={c1_next} sends={producer.status_counts()}; {'; '.join(notes)}"
    )
    print(f"\nmaster kill: {report}")
    assert not verdict.lost, f"SEND_OK messages lost: {report}"
    assert not verdict.unexpected, f"consumed messages never sent: {report}"
    assert not skipped, f"queue offsets never delivered: {report}"
    assert not regress, f"the restarted master rolled the group's offsets back (master, slave): {regress}; {report}"
    assert len(redelivered) <= REDELIVERY_BOUND, f"messages consumed before the restart delivered again: {report}"
