"""Real master + slave broker processes: SIGKILL the master under load, then consume everything from the slave.

kafkatest shape (STYLE §6): background senders record every id and outcome (acked = SEND_OK, weak = stored on
the master only, unknown = no answer), the fault is applied, the survivors are drained, and the check is on the
sets. The durability claims (DESIGN §4, reliability.md §3.2):
- SYNC_MASTER: every SEND_OK message is on the slave (lost = 0);
- ASYNC_MASTER: a SEND_OK message may be missing from the slave only if it lies beyond the slave's commitlog end.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid

import pytest

from remoting.errors import RemotingError
from tests.integration.broker.rpc import BrokerClient, message
from tests.integration.replication.helpers import ha
from harness.procs import Broker
from harness.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "ReplTopic"
QUEUES = 4
SENDERS = 6
BATCH = 10
MIN_ACKED_AT_KILL = 300
RECORD_MAX = 1024  # bytes: an upper bound of one test record (200-byte body, a few properties)
SEND_OK, FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT = 0, 10, 11, 12


def assert_ha_listening(master: Broker) -> None:
    """A started master serves its HA port (the server starts HAService before it reports ready)."""
    with socket.socket() as s:
        s.settimeout(5)
        refused = s.connect_ex(("127.0.0.1", master.ha_port))
    if refused:
        master.stop()
        raise AssertionError(f"nothing listens on the master's haListenPort {master.ha_port}:\n{master.log_tail()}")


def start_pair(tmp_path, namesrv, role: str) -> tuple[Broker, Broker]:
    master = Broker(tmp_path / "m", name="broker-r", namesrv_addr=namesrv.addr, role=role).start()
    assert_ha_listening(master)
    slave = Broker(tmp_path / "s", name="broker-r", namesrv_addr=namesrv.addr, role="SLAVE", broker_id=1,
                   haMasterAddress=master.ha_addr, slaveReadEnable=True, slaveSynchronizeInterval=1000).start()
    return master, slave


class Ledger:
    def __init__(self) -> None:
        self.acked: dict[str, int] = {}  # id -> the message's physical offset (from its offsetMsgId)
        self.weak: set[str] = set()
        self.unknown: set[str] = set()


async def sender(client: BrokerClient, ledger: Ledger, stop: asyncio.Event, n: int) -> None:
    i = 0
    while not stop.is_set():
        ids = [f"{n}-{i}-{k}-{uuid.uuid4().hex[:8]}" for k in range(BATCH)]
        i += 1
        msgs = [message(f"{mid}".encode() + b"x" * 200, UNIQ_KEY=mid) for mid in ids]
        try:
            resp = await client.send(TOPIC, i % QUEUES, msgs)
        except RemotingError:
            ledger.unknown.update(ids)
            return  # the master is gone
        if resp.code == SEND_OK:
            for mid, offset_msg_id in zip(ids, resp.msg_ids):
                ledger.acked[mid] = int(offset_msg_id[-16:], 16)  # offsetMsgId ends with the physical offset
        elif resp.code in (FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT):
            ledger.weak.update(ids)
        else:
            ledger.unknown.update(ids)
            await asyncio.sleep(0.05)


async def run_kill_scenario(master: Broker, slave: Broker) -> tuple[Ledger, set[str], int]:
    mc = BrokerClient(master.addr)
    sc = BrokerClient(slave.addr)
    try:
        assert (await mc.create_topic(TOPIC, QUEUES)).code == 0
        # the slave must know the topic (slave sync) and be connected before the load starts
        await async_wait_until(lambda: _slave_has_topic(sc), 30, "slave synced the topic config from the master")
        await async_wait_until(lambda: _master_has_slave(mc), 30, "slave connected to the master's HA port")
        ledger = Ledger()
        stop = asyncio.Event()
        tasks = [asyncio.create_task(sender(mc, ledger, stop, n)) for n in range(SENDERS)]
        # the kill lands in the middle of the load, once enough of it was acked
        await async_wait_until(lambda: len(ledger.acked) >= MIN_ACKED_AT_KILL, 60,
                               lambda: f"{MIN_ACKED_AT_KILL} acked sends before the kill; {len(ledger.acked)} so far")
        master.kill()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        # let the slave dispatch what it has, then drain every queue from it
        status = await ha(sc)
        slave_max = status.commitlog_max_offset
        consumed: set[str] = set()
        await async_wait_until(lambda: _slave_dispatched(sc), 30, "slave dispatched its whole commitlog")
        for q in range(QUEUES):
            for m in await sc.pull_all("drain-group", TOPIC, q):
                consumed.add(m.properties.get("UNIQ_KEY", ""))
        return ledger, consumed, slave_max
    finally:
        await mc.close()
        await sc.close()


async def _slave_has_topic(sc: BrokerClient) -> bool:
    got = await sc.pull("probe-group", TOPIC, 0, 0, 1)
    return got.code != 17  # TOPIC_NOT_EXIST


async def _slave_dispatched(sc: BrokerClient) -> bool:
    return (await sc.runtime_info()).get("dispatchBehindBytes") == "0"


async def _master_has_slave(mc: BrokerClient) -> bool:
    status = await ha(mc)
    return any(s.state == "OK" for s in status.slaves)


async def test_sigkill_of_a_sync_master_under_load_loses_no_send_ok_message(tmp_path, namesrv):
    master, slave = start_pair(tmp_path, namesrv, "SYNC_MASTER")
    try:
        ledger, consumed, _ = await run_kill_scenario(master, slave)
        lost = set(ledger.acked) - consumed
        assert not lost, f"{len(lost)} SEND_OK messages missing on the slave, e.g. {sorted(lost)[:20]}"
    finally:
        slave.stop()
        master.stop()


async def test_sigkill_of_an_async_master_loses_only_messages_beyond_the_slave_end(tmp_path, namesrv):
    master, slave = start_pair(tmp_path, namesrv, "ASYNC_MASTER")
    try:
        ledger, consumed, slave_max = await run_kill_scenario(master, slave)
        lost = {mid: off for mid, off in ledger.acked.items() if mid not in consumed}
        # a message of ~300 bytes at offset p is on the slave iff p + size <= slave end
        below = sorted(mid for mid, off in lost.items() if off + RECORD_MAX < slave_max)
        assert not below, f"{len(below)} SEND_OK messages below the slave end {slave_max} are missing: {below[:20]}"
        print(f"ASYNC_MASTER kill: acked {len(ledger.acked)}, lost beyond the slave end {len(lost)}, "
              f"weak {len(ledger.weak)}, at {time.strftime('%H:%M:%S')}")
    finally:
        slave.stop()
        master.stop()


async def test_a_slave_without_ha_master_address_learns_it_from_the_nameserver_and_sync_sends_succeed(
        tmp_path, namesrv):
    master = Broker(tmp_path / "m", name="broker-n", namesrv_addr=namesrv.addr, role="SYNC_MASTER").start()
    assert_ha_listening(master)
    slave = Broker(tmp_path / "s", name="broker-n", namesrv_addr=namesrv.addr, role="SLAVE", broker_id=1).start()
    mc = BrokerClient(master.addr)
    sc = BrokerClient(slave.addr)
    try:
        assert (await mc.create_topic(TOPIC, QUEUES)).code == 0
        await async_wait_until(lambda: _master_has_slave(mc), 30, "slave found the master HA address via namesrv")
        resp = await mc.send(TOPIC, 0, [message(b"via-namesrv", UNIQ_KEY="n-1")])
        assert resp.code == SEND_OK, resp.remark
        status = await ha(sc)
        assert status.connected and status.master_ha_addr == master.ha_addr
        assert status.replicated_bytes > 0
    finally:
        await mc.close()
        await sc.close()
        slave.stop()
        master.stop()
