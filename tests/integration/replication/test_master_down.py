"""A master goes down and comes back under load (DESIGN §4, spec §6.4, reliability.md F3 + O1), SDK clients only.

Topology: broker-a = SYNC_MASTER + slave (slaveReadEnable), broker-b = a master alone; topic on both groups.
A producer sends unique ids all along; a PushConsumer group consumes; the master of broker-a is SIGKILLed and
restarted. Checked with the vocabulary of reliability.md §8:
- lost = acked (SEND_OK) - consumed = 0, and every message stored on either master is consumed (none skipped);
- while broker-a's master is down: the consumer drains broker-a's queues from the slave, producers go to broker-b;
- when it returns: the master took the slave's offsets, serves the pulls again and gets the commits;
- offset-regress = 0: the committed offsets seen on each node never go back (sampled every 0.2 s).
Duplicates are reported, not asserted (the bound is the offset-sync window).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from client import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MQClientError,
    Producer,
    PushConsumer,
    SendStatus,
)
from remoting.errors import RemotingError
from tests.integration.broker.rpc import BrokerClient
from tests.integration.replication.helpers import master, slave, wait_slave_knows_topic, wait_slaves_ok
from harness.procs import Broker
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC, GROUP, QUEUES = "TDown", "GDown", 2


class History:
    def __init__(self) -> None:
        self.sent: dict[str, tuple[SendStatus, str, float]] = {}  # id -> (status, brokerName, when)
        self.unknown: set[str] = set()
        self.consumed: list[str] = []
        self.commits: dict[tuple[str, int], list[int]] = {}  # (node, queue) -> committed offsets seen, in order

    def acked(self, broker: str | None = None) -> set[str]:
        return {i for i, (st, b, _) in self.sent.items() if st is SendStatus.SEND_OK and broker in (None, b)}


async def produce(producer: Producer, h: History, stop: asyncio.Event, worker: int) -> None:
    n = 0
    while not stop.is_set():
        mid = f"w{worker}-{n}"
        n += 1
        try:
            r = await producer.send(Message(TOPIC, mid.encode()))
            h.sent[mid] = (r.status, r.message_queue.broker_name, time.monotonic())
        except MQClientError:
            h.unknown.add(mid)
        await asyncio.sleep(0.01)


async def watch_commits(nodes: dict[str, Broker], h: History, stop: asyncio.Event) -> None:
    clients: dict[str, BrokerClient] = {}
    try:
        while not stop.is_set():
            for name, b in nodes.items():
                if not b.running():
                    clients.pop(name, None)
                    continue
                c = clients.setdefault(name, BrokerClient(b.addr))
                for q in range(QUEUES):
                    try:
                        code, offset = await c.query_offset(GROUP, TOPIC, q)
                    except RemotingError:
                        continue  # the node is down or restarting: no sample
                    if code == 0:
                        seen = h.commits.setdefault((name, q), [])
                        if not seen or seen[-1] != offset:
                            seen.append(offset)
            await asyncio.sleep(0.2)
    finally:
        for c in clients.values():
            await c.close()


async def commits_at_queue_ends(admin: AdminClient, addr: str) -> bool:
    """The group's committed offset on ``addr`` is the end of each of the topic's queues there."""
    for q in range(QUEUES):
        end = (await admin.queue_offsets(addr, TOPIC, q)).max_offset
        if await admin.query_consumer_offset(addr, GROUP, TOPIC, q) != end:
            return False
    return True


async def test_with_the_master_down_consumers_read_the_slave_producers_use_the_other_group_and_nothing_rolls_back(
        tmp_path, namesrv):
    ma = master(tmp_path, namesrv, "broker-a", "SYNC_MASTER", sub="a0", slaveReadEnable=True)
    sa = slave(tmp_path, namesrv, "broker-a", sub="a1", haMasterAddress=ma.ha_addr, slaveReadEnable=True)
    mb = master(tmp_path, namesrv, "broker-b", "ASYNC_MASTER", sub="b0")
    admin = AdminClient(namesrv.addr)
    h = History()
    stop_load, stop_watch = asyncio.Event(), asyncio.Event()
    consumer = None
    tasks: list[asyncio.Task] = []
    try:
        mc = BrokerClient(ma.addr)
        await wait_slaves_ok(mc)
        await mc.close()
        for b in (ma, mb):
            await admin.update_topic(b.addr, TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

        async def routed() -> bool:
            route = await admin.topic_route(TOPIC)
            return {q.broker_name for q in route.publish_queues} == {"broker-a", "broker-b"} \
                and 1 in route.broker_addrs.get("broker-a", {})

        await async_wait_until(routed, 30, "both groups and broker-a's slave in the route", 0.2)
        sc = BrokerClient(sa.addr)
        await wait_slave_knows_topic(sc, TOPIC)
        await sc.close()

        gate = asyncio.Event()  # closed: the listener holds its batch, so pulls stop at max_inflight_messages
        gate.set()

        async def listener(msgs) -> ConsumeStatus:
            await gate.wait()
            h.consumed.extend(m.body.decode() for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(GROUP, namesrv.addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                suspend_ms=1000, persist_interval_s=0.5, pull_retry_delay_s=0.5,
                                poll_name_server_interval_s=5.0, max_inflight_messages=16,
                                pull_batch_size=8)
        consumer.subscribe(TOPIC)
        consumer.register_message_listener(listener)
        await consumer.start()
        producer = await Producer("PDown", namesrv.addr, send_timeout_s=3.0, poll_name_server_interval_s=5.0).start()
        tasks = [asyncio.create_task(produce(producer, h, stop_load, w)) for w in range(3)]
        tasks.append(asyncio.create_task(watch_commits({"a-master": ma, "a-slave": sa}, h, stop_watch)))
        await async_wait_until(lambda: len(h.acked("broker-a")) >= 100 and len(h.consumed) >= 100, 30,
                               "load on both groups, consumed", 0.1)

        # --- the master of broker-a dies with a backlog of the group on it -----------------------------------
        gate.clear()
        consumed_set = lambda: set(h.consumed)
        await async_wait_until(lambda: len(h.acked("broker-a") - consumed_set()) > 60, 30,
                               "a backlog of the group on broker-a (the listener holds its batch)", 0.05)
        ma.kill()
        killed_at = time.monotonic()
        acked_a_before = h.acked("broker-a")
        backlog = acked_a_before - consumed_set()
        assert len(backlog) > 40, f"too small a backlog at the kill: {len(backlog)}"
        gate.set()
        await async_wait_until(lambda: acked_a_before <= consumed_set(), 30,
                               lambda: f"broker-a's acked messages read from the slave; "
                                       f"{len(acked_a_before - consumed_set())} missing", 0.1)
        drained_from_slave_s = time.monotonic() - killed_at

        def late_sends() -> dict:  # answered a while after the kill: no send to broker-a was in flight any more
            return {i: v for i, v in h.sent.items() if v[2] > killed_at + 1.0}

        await async_wait_until(lambda: len(late_sends()) >= 30, 30, "sends answered after the kill", 0.05)
        late = late_sends()
        assert late and {b for _, b, _ in late.values()} == {"broker-b"}, "sends after the kill must go to broker-b"
        assert all(st is SendStatus.SEND_OK for st, _, _ in late.values())
        # the SDK commits to the slave while the master is unreachable: its offsets reach the queues' ends
        async with AdminClient(namesrv.addr) as a2:
            await async_wait_until(lambda: commits_at_queue_ends(a2, sa.addr), 20,
                                   "the consumer's commits on the slave", 0.2)
            slave_commits = {q: await a2.query_consumer_offset(sa.addr, GROUP, TOPIC, q) for q in range(QUEUES)}

        # --- it comes back ------------------------------------------------------------------------------------
        ma.start(30)
        returned_at = time.monotonic()
        async with AdminClient(namesrv.addr) as a2:
            # (the first calls may fail while the returned master's port is not yet accepting)
            async def ask(q: int) -> tuple[int]:
                return (await a2.query_consumer_offset(ma.addr, GROUP, TOPIC, q),)

            taken = {q: (await async_wait_until(lambda q=q: ask(q), 15, "the returned master answers", 0.2))[0]
                     for q in range(QUEUES)}
            slave_now = {q: await a2.query_consumer_offset(sa.addr, GROUP, TOPIC, q) for q in range(QUEUES)}
        # the returned master took the offsets its slave accepted while it was down (no rollback for consumers)
        assert all(taken[q] >= slave_commits[q] for q in range(QUEUES)), (taken, slave_commits, slave_now)

        def resent_to_a() -> bool:
            fresh = {i for i, (st, b, t) in h.sent.items() if b == "broker-a" and t > returned_at}
            return len(fresh) >= 20 and fresh <= consumed_set()

        await async_wait_until(resent_to_a, 60, "sends to the returned broker-a master, consumed", 0.2)
        stop_load.set()
        await asyncio.gather(*tasks[:-1])
        await producer.stop()

        stored: set[str] = set()  # everything either master holds, read node by node
        for b in (ma, mb):
            c = BrokerClient(b.addr)
            try:
                for q in range(QUEUES):
                    stored.update(x.body.decode() for x in await c.pull_all("checker", TOPIC, q))
            finally:
                await c.close()
        await async_wait_until(lambda: stored <= consumed_set(), 30,
                               lambda: f"{len(stored - consumed_set())} stored messages not consumed", 0.1)

        async def master_has_all_commits() -> bool:
            async with AdminClient(namesrv.addr) as a3:
                return await commits_at_queue_ends(a3, ma.addr)

        await async_wait_until(master_has_all_commits, 30, "the consumer's final commits on the returned master", 0.3)
        served_by_master = int((await admin.broker_runtime_info(ma.addr)).get("msgGetTotal", "0"))
        assert served_by_master > 0, "the returned master served no pull: consumption did not go back to it"
        served_by_slave = int((await admin.broker_runtime_info(sa.addr)).get("msgGetTotal", "0"))
        assert served_by_slave >= len(backlog) // 2, (served_by_slave, len(backlog))
    finally:
        stop_load.set()
        stop_watch.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if consumer is not None:
            await consumer.stop()
        await admin.stop()
        for b in (mb, sa, ma):
            b.stop()

    lost = h.acked() - set(h.consumed)
    weak = {i for i, (st, _, _) in h.sent.items() if st is not SendStatus.SEND_OK}
    dup = len(h.consumed) - len(set(h.consumed))
    print(f"master down: sent {len(h.sent)} (weak {len(weak)}, unknown {len(h.unknown)}), consumed "
          f"{len(set(h.consumed))} unique, {dup} duplicated; backlog at the kill {len(backlog)}, served by the slave "
          f"{served_by_slave}, drained from the slave "
          f"{drained_from_slave_s:.1f}s after the kill; commits seen {h.commits}")
    assert not lost, f"lost {len(lost)}: {sorted(lost)[:20]}"
    assert not (weak - set(h.consumed)), "weak-acked messages are stored on the master and must be consumed too"
    assert set(h.consumed) <= set(h.sent) | h.unknown, "unexpected messages consumed"
    for (node, q), seen in h.commits.items():
        assert seen == sorted(seen), f"offset-regress on {node} queue {q}: {seen}"
