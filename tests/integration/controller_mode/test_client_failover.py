"""The SDK through a controller-mode failover, real processes: one etcd, a nameserver running the controller, a
broker group of three controller-mode brokers (the topic's only group), an SDK producer sending SYNC in a stream and
an SDK push consumer. The master is SIGKILLed: every send of the stream still ends in a status (the ones under way
are retried once the route names the new master; none raises), the first SEND_OK after the kill comes from the new
master through a route the producer re-read on demand (its 30 s poll, set to 10 min here, never ran), and the push
consumer gets every acknowledged message (the fault checker judges the history).

The nameserver side: the dead master's entry leaves the route when its connection closes, and the new master
registers as brokerId 0 as soon as it took the role (checked on the route the producer used)."""

from __future__ import annotations

import asyncio
import json

import pytest

from client import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
)
from client.namesrv import NamesrvClient
from harness.checker import Mode, Outcome, Read, Send, check
from harness.controller_mode import controller_broker, replica_info, sync_state_set_is
from harness.waiting import async_wait_until
from remoting.codes import RequestCode
from remoting.message_codec.ids import parse_offset_msg_id

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "ClientFailoverTopic"
GROUP = "broker-cf"
NEVER_POLL_S = 600.0  # the route poll cannot be what brought the new master


async def registered_state_version(namesrv_addr: str, broker_addr: str) -> int:
    """The stateVersion of the DataVersion the nameserver holds for ``broker_addr`` (QUERY_DATA_VERSION)."""
    client = NamesrvClient(namesrv_addr)
    try:
        ext = {"clusterName": "DefaultCluster", "brokerName": GROUP, "brokerAddr": broker_addr, "brokerId": "0"}
        body = b'{"counter":0,"stateVersion":0,"timestamp":0}'  # differs from any registered: nothing refreshed
        response = await client.invoke(RequestCode.QUERY_DATA_VERSION, ext, body)
        return int(json.loads(response.body_bytes())["stateVersion"])
    finally:
        await client.close()


class Stream:
    """One writer sending in order; every outcome recorded for ``harness.checker``."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.sends: list[Send] = []
        self.results: list[tuple[int, SendStatus, str]] = []  # (seq, status, the storing broker's address)
        self.errors: list[str] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        while not self.stop.is_set():
            seq = len(self.sends)
            ident = f"m{seq}"
            try:
                result = await self.producer.send(Message(TOPIC, ident.encode()))
            except Exception as exc:  # noqa: BLE001 - recorded: the test demands there is none
                self.errors.append(f"{ident}: {exc}")
                self.sends.append(Send(ident, "w", seq, Outcome.UNKNOWN, detail=str(exc)[:80]))
                continue
            ok = result.status is SendStatus.SEND_OK
            (host, port), _ = parse_offset_msg_id(result.offset_msg_id)  # the store host of the answering broker
            self.results.append((seq, result.status, f"{host}:{port}"))
            self.sends.append(Send(ident, "w", seq, Outcome.ACKED if ok else Outcome.WEAK, detail=result.status.name))
            await asyncio.sleep(0.005)

    def acked(self) -> set[str]:
        return {s.id for s in self.sends if s.outcome is Outcome.ACKED}


async def test_sdk_producer_and_push_consumer_go_on_through_a_kill_of_the_master(tmp_path, cns):
    brokers = [controller_broker(tmp_path, cns, GROUP, i) for i in (1, 2, 3)]
    admin = await AdminClient(cns.addr).start()
    producer = Producer("cf-producer", cns.addr, send_timeout_s=15.0, poll_name_server_interval_s=NEVER_POLL_S)
    reads: list[Read] = []

    async def listener(msgs) -> ConsumeStatus:
        reads.extend(Read(m.body.decode(), f"{TOPIC}:{m.queue_id}", m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("cf-consumer", cns.addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            suspend_ms=1000, pull_retry_delay_s=0.5, persist_interval_s=0.5,
                            poll_name_server_interval_s=NEVER_POLL_S)
    consumer.subscribe(TOPIC)
    consumer.register_message_listener(listener)
    stream = Stream(producer)
    task = None
    try:
        for b in brokers:
            b.start()
        await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2, 3}), 30, "the slaves join the SyncStateSet")
        old = await replica_info(cns, GROUP)
        old_master = brokers[old.master_broker_id - 1]
        await admin.update_topic(old_master.addr, TOPIC, read_queue_nums=2, write_queue_nums=2)
        await producer.start()
        await consumer.start()
        task = asyncio.create_task(stream.run())
        await async_wait_until(lambda: len(stream.acked()) >= 30 and len(reads) >= 10, 30,
                               "SEND_OKs from the first master and reads by the push consumer", 0.05)

        before = producer.routes.stats
        polled, on_demand, changes = before.polled, before.on_demand, before.changes
        version = producer.routes.cached(TOPIC).version
        killed_at_seq = len(stream.sends) + 1  # a send under way now may still be answered by the old master
        old_master.kill()

        def new_master_acked() -> bool:
            return any(seq >= killed_at_seq and status is SendStatus.SEND_OK and addr != old_master.addr
                       for seq, status, addr in stream.results)

        await async_wait_until(new_master_acked, 60, lambda: f"no SEND_OK after the kill: {stream.errors[-3:]}", 0.05)
        first_ok = next(r for r in stream.results if r[0] >= killed_at_seq and r[1] is SendStatus.SEND_OK)
        stats = producer.routes.stats
        # facts, not timings: the poll never ran, a refresh after the failure did, and it changed the route
        assert stats.polled == polled == 0, stats
        assert stats.on_demand > on_demand and stats.changes > changes, stats
        route = producer.routes.cached(TOPIC)
        assert route.version > version
        info = await replica_info(cns, GROUP)
        new_master = brokers[info.master_broker_id - 1]
        assert info.master_broker_id != old.master_broker_id and info.master_epoch > old.master_epoch, info
        assert first_ok[2] == new_master.addr == route.broker_addrs[GROUP][0], (first_ok, route.broker_addrs)
        assert old_master.addr not in route.broker_addrs[GROUP].values()  # dropped when its connection closed
        # it registered with its masterEpoch as stateVersion: an old master still registering cannot take id 0 back
        assert await registered_state_version(cns.addr, new_master.addr) == info.master_epoch

        target = len(stream.acked()) + 30
        await async_wait_until(lambda: len(stream.acked()) >= target, 30, "SEND_OKs go on after the failover", 0.05)
        stream.stop.set()
        await task
        task = None
        assert stream.errors == [], stream.errors[:5]  # no send raised: those under way waited for the new master

        acked = stream.acked()
        await async_wait_until(lambda: acked <= {r.id for r in reads}, 60,
                               lambda: f"unconsumed: {sorted(acked - {r.id for r in reads})[:10]}", 0.1)
        report = check(stream.sends, list(reads))
        assert not report.problems(Mode.SYNC), (report.problems(Mode.SYNC), report.figures())
    finally:
        stream.stop.set()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await consumer.stop()
        await producer.stop()
        await admin.stop()
        for b in brokers:
            b.stop()
