"""`mqctl updateSubGroup -c DefaultCluster -g G -i 1 -w 1` sends group G's reads to the slaves.

The brokers run with slaveReadEnable=true. A pull answered by a master carries suggestWhichBrokerId = the group's
brokerId (1); the SDK follows that advice per queue, so after the first pull of a queue every pull of G goes to
the slave of that broker group. The proof is on both sides: the address that answered each pull (PullResult)
and the slaves' own count of messages delivered to G (rocketmq_messages_out_total, read inside the container).
A control group with the default brokerId (0) keeps reading from the masters.
"""

from __future__ import annotations

import asyncio

from client import AdminClient, PullConsumer, PullStatus
from tests.system.cluster import NAMESRV_ADDR
from tests.system.harness import (
    MASTERS,
    SLAVES,
    BackgroundProducer,
    amqctl,
    await_slaves_know,
    broker_metrics,
    metric_sum,
    unique,
)

MESSAGES = 120
PULL_NUMS = 2  # small pulls: several per queue, so the advice of the first one shows in the next ones
QUEUES = 4  # per broker group (the topics fixture)


async def _read_all(group: str, topic: str, ends: dict[tuple[str, int], int]) -> list[tuple[str, str, int]]:
    """Pull every queue of ``topic`` from offset 0 to its end on the master, as ``group``.

    Returns (broker name, address that served the pull, messages) per pull. A slave that has not replicated a
    queue's tail yet answers "nothing new"; the read waits for it (bounded).
    """
    served = []
    async with PullConsumer(group, NAMESRV_ADDR) as consumer:
        for mq in await consumer.fetch_subscribe_queues(topic):
            offset, end = 0, ends[(mq.broker_name, mq.queue_id)]
            deadline = asyncio.get_running_loop().time() + 15
            while offset < end:
                result = await consumer.pull(mq, offset, PULL_NUMS)
                if result.status is PullStatus.FOUND:
                    served.append((mq.broker_name, result.broker_addr, len(result.messages)))
                    offset = result.next_begin_offset
                    continue
                assert asyncio.get_running_loop().time() < deadline, (
                    f"{group} stuck at {mq} offset {offset} of {end}: {result.status} from {result.broker_addr}"
                )
                await asyncio.sleep(0.1)
    return served


async def _queue_ends(topic: str) -> dict[tuple[str, int], int]:
    async with AdminClient(NAMESRV_ADDR) as admin:
        return {
            (name, q): (await admin.queue_offsets(addr, topic, q)).max_offset
            for name, addr in MASTERS.items()
            for q in range(QUEUES)
        }


async def test_a_group_with_broker_id_1_reads_from_the_slaves(whole, topics):
    topic = topics["slave_read"]
    group, control = unique("sys_slave_group"), unique("sys_master_group")
    await amqctl("updateSubGroup", "-c", "DefaultCluster", "-g", group, "-i", "1", "-w", "1")
    await amqctl("updateSubGroup", "-c", "DefaultCluster", "-g", control)
    # Each slave answers with its own copy of the group's config: wait for its metadata sync (every 10 s).
    await await_slaves_know(groups=[group, control], timeout_s=30)

    producer = BackgroundProducer(topic, rate=400)
    await producer.start()
    await producer.wait_started(MESSAGES)
    await producer.stop()
    assert producer.status_counts() == {"SEND_OK": len(producer.sends)}, producer.status_counts()
    ends = await _queue_ends(topic)
    assert sum(ends.values()) == len(producer.sends), ends

    before = {name: await asyncio.to_thread(broker_metrics, whole, f"{name}-s") for name in SLAVES}
    served = await _read_all(group, topic, ends)
    served_control = await _read_all(control, topic, ends)
    after = {name: await asyncio.to_thread(broker_metrics, whole, f"{name}-s") for name in SLAVES}

    total = len(producer.sends)
    assert sum(n for *_, n in served) == total, f"group {group} read {served}"
    assert sum(n for *_, n in served_control) == total, f"group {control} read {served_control}"
    by_addr: dict[str, int] = {}
    for _, addr, n in served:
        by_addr[addr] = by_addr.get(addr, 0) + n
    # The first pull of each queue has no advice yet and goes to the master; every later one to the slave.
    first_per_queue = 2 * QUEUES * PULL_NUMS
    from_slaves = sum(by_addr.get(addr, 0) for addr in SLAVES.values())
    assert from_slaves >= total - first_per_queue, f"messages of {group} by serving address: {by_addr}"
    for name in SLAVES:
        assert by_addr.get(SLAVES[name], 0) > 0, f"{name}'s slave served none of {group}'s reads: {by_addr}"
    assert {addr for _, addr, _ in served_control} <= set(MASTERS.values()), (
        f"the control group {control} (brokerId 0) was served by {sorted({a for _, a, _ in served_control})}"
    )

    # The slaves' own metrics agree: they delivered exactly what the client says they served.
    for name in SLAVES:
        delta = metric_sum(after[name], "rocketmq_messages_out_total", topic=topic, consumer_group=group) - metric_sum(
            before[name], "rocketmq_messages_out_total", topic=topic, consumer_group=group
        )
        assert delta == by_addr.get(SLAVES[name], 0), (
            f"{name}-s counted {delta} messages out to {group}; the client saw {by_addr.get(SLAVES[name], 0)}"
        )
        control_out = metric_sum(after[name], "rocketmq_messages_out_total", topic=topic, consumer_group=control)
        assert control_out == 0, f"{name}-s delivered {control_out} messages to the control group {control}"
