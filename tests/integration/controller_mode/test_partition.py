"""Issue 23, item 2, on real processes: the master runs in a network namespace of its own (harness/netns.py) and is
partitioned from the controller (so from etcd) and from its slaves' HA connections, but not from clients. It stops
answering SEND_OK once its lease is gone and its SyncStateSet cannot ack; a slave is elected and takes SYNC sends;
after the heal the old master rejoins as a slave, cuts what was never confirmed and catches up. Judged by
harness/checker.py: no acknowledged message lost, and no two brokers of the group answering SEND_OK in the same
period (from the client's send and answer times of every SEND_OK and the broker that answered it)."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import AdminClient, Producer, SendStatus
from harness import netns
from harness.checker import Mode, Outcome
from harness.controller_mode import (
    SendLog,
    commitlog_bytes,
    controller_broker,
    controller_namesrv,
    drain,
    log_differences,
    replica_info,
    sync_state_set_is,
)
from harness.netns_broker import write_netns_file
from harness.waiting import async_wait_until
from remoting.codes import ResponseCode
from remoting.message_codec import parse_offset_msg_id
from tests.integration.broker.rpc import BrokerClient, message

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

GROUP = "broker-p"
TOPIC = "PartitionTopic"
WEAK = (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_DISK_TIMEOUT)


@pytest.fixture
def ns_master():
    why = netns.unavailable()
    if why is not None:
        pytest.skip(f"the master needs a network namespace of its own: {why}")
    space = netns.NetNamespace.create("fence")
    try:
        yield space
    finally:
        space.destroy()


async def direct_sends(client: BrokerClient, broker: str, log: SendLog, stop: asyncio.Event,
                       remarks: list[str]) -> None:
    """A client that keeps sending to one broker's address, whatever the route says (it is not partitioned)."""
    while not stop.is_set():
        ident = f"direct-{len(log.sends)}"
        sent = time.monotonic()
        try:
            answer = await client.send(TOPIC, 0, [message(ident.encode() + b"|")])
        except Exception as exc:  # noqa: BLE001 - no answer (the broker is switching role): it may be stored
            log.record(ident, "direct", Outcome.UNKNOWN, detail=str(exc))
            await asyncio.sleep(0.05)
            continue
        if answer.code == ResponseCode.SUCCESS:
            offset = parse_offset_msg_id((answer.ext or {})["msgId"])[1]
            log.record(ident, "direct", Outcome.ACKED, broker=broker, sent=sent, offset=offset)
        else:
            remarks.append(f"{answer.code} {answer.remark}")
            log.record(ident, "direct", Outcome.WEAK if answer.code in WEAK else Outcome.FAILED,
                       detail=answer.remark or "")
            await asyncio.sleep(0.05)


async def test_a_master_partitioned_from_etcd_and_its_slaves_is_fenced_replaced_and_rejoins(tmp_path, etcd, ns_master):
    host, inside = ns_master.host_ip, ns_master.ns_ip
    with controller_namesrv(tmp_path / "ns", etcd.endpoint) as ns:
        ns_addr = f"{host}:{ns.port}"
        old = controller_broker(tmp_path, ns, GROUP, 1, ns_addr=ns_addr, brokerIP1=inside,
                                haMaxTimeSlaveNotCatchup=60_000)
        old.module = "harness.netns_broker"
        write_netns_file(old.conf_path, ns_master.name)
        slaves = [controller_broker(tmp_path, ns, GROUP, i, ns_addr=ns_addr, brokerIP1=host,
                                    haMaxTimeSlaveNotCatchup=60_000) for i in (2, 3)]
        brokers = [old, *slaves]
        old_addr = f"{inside}:{old.port}"
        log = SendLog(GROUP, TOPIC)
        producer = await Producer("partition-producer", ns_addr, send_timeout_s=8.0).start()
        client = BrokerClient(old_addr)
        stop = asyncio.Event()
        remarks: list[str] = []
        sender = None
        try:
            old.start()
            assert (await replica_info(ns, GROUP)).master_address == old_addr
            for b in slaves:
                b.start()
            await async_wait_until(sync_state_set_is(ns, GROUP, {1, 2, 3}), 30, "the slaves join the SyncStateSet")
            async with AdminClient(ns_addr) as admin:
                await admin.update_topic(old_addr, TOPIC, read_queue_nums=2, write_queue_nums=2)
            for i in range(20):
                assert await log.produce(producer, f"before-{i}") is SendStatus.SEND_OK
            sender = asyncio.ensure_future(direct_sends(client, old_addr, log, stop, remarks))
            await async_wait_until(lambda: any(s.id.startswith("direct") and s.outcome is Outcome.ACKED
                                               for s in log.sends), 10, "the direct client gets SEND_OK")

            # the partition: controller (and nameserver) and the slaves' HA connections; clients still get through
            ns_master.cut(host, ns.port)
            ns_master.cut_served(host, old.ha_port)
            cut_at = time.monotonic()

            async def elected() -> bool:
                return (await replica_info(ns, GROUP)).master_broker_id in (2, 3)

            await async_wait_until(elected, 30, "a slave elected while the master is partitioned", 0.1)
            info = await replica_info(ns, GROUP)
            new = brokers[info.master_broker_id - 1]
            new_addr = f"{host}:{new.port}"

            async def routed() -> bool:
                async with AdminClient(ns_addr) as admin:
                    return (await admin.topic_route(TOPIC)).broker_addrs[GROUP].get(0) == new_addr

            await async_wait_until(routed, 20, "the nameserver routes to the new master", 0.1)
            # the first producer still routes to the old master, which it reaches and which answers (fenced), so
            # its route waits for the next poll; a producer that asks the nameserver now gets the new master
            await producer.stop()
            producer = await Producer("partition-producer-2", ns_addr, send_timeout_s=8.0).start()

            async def new_master_send_ok() -> bool:
                return await log.produce(producer, f"after-{len(log.sends)}") is SendStatus.SEND_OK

            await async_wait_until(new_master_send_ok, 30, lambda: f"a SEND_OK from the new master: {log.sends[-2:]}",
                                   0.05)
            fenced_by = time.monotonic() + 3.0
            await async_wait_until(lambda: time.monotonic() > fenced_by and any("fenced" in r for r in remarks), 20,
                                   lambda: f"the old master says it is fenced: {remarks[-3:]}", 0.1)
            for i in range(20):
                assert await log.produce(producer, f"during-{i}") is SendStatus.SEND_OK
            late_oks = [o for o in log.oks if o.broker == old_addr and o.sent > cut_at + 2.0]
            assert late_oks == [], late_oks  # lease (1.0 s) gone and no acks: no SEND_OK from the old master

            # heal: the old master learns it was replaced, rejoins as a slave, cuts what was never confirmed
            ns_master.heal_all()
            await async_wait_until(sync_state_set_is(ns, GROUP, {1, 2, 3}), 60, "the old master rejoins the set")
            stop.set()
            await sender
            assert "cutting the log" in old.output() or "becomes a slave" in old.output()
            for i in range(10):
                assert await log.produce(producer, f"later-{i}") is SendStatus.SEND_OK
            others = [b for b in brokers if b is not new]

            async def identical() -> bool:
                want = commitlog_bytes(new)
                return all(commitlog_bytes(b) == want for b in others)

            await async_wait_until(identical, 30, lambda: log_differences(new, others))
            report = log.report(await drain(ns_addr, TOPIC, GROUP, 2))
            assert not report.problems(Mode.SYNC), (report.problems(Mode.SYNC), report.figures())
            figures = report.figures()
            assert figures["lost"] == 0 and figures["overlapping_send_ok"] == 0, figures
            assert {o.broker for o in log.oks} == {old_addr, new_addr}, {o.broker for o in log.oks}
            print("partition figures:", figures)
        finally:
            stop.set()
            if sender is not None and not sender.done():
                sender.cancel()
            await client.close()
            await producer.stop()
            ns_master.heal_all()
            for b in brokers:
                b.stop()
