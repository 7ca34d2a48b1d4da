"""Shared pieces of the replication process tests: start a group, read HA status, compare commitlogs, drain queues.

Every wait is bounded (harness/waiting.py) and generous: the box has 2 shared cores.
"""

from __future__ import annotations

import time
from pathlib import Path

from client.admin_bodies import HAStatus, parse_ha_status
from remoting import fastjson
from remoting.codes import RequestCode
from tests.integration.broker.rpc import BrokerClient, message
from harness.procs import Broker, Namesrv
from harness.waiting import async_wait_until

SEND_OK, FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT = 0, 10, 11, 12
TOPIC_NOT_EXIST = 17
SMALL_FILE = 256 * 1024  # commitlog file size: a few thousand small messages span several files
BOOT_S = 30.0  # broker boot on a loaded box


STARTED: list[Broker] = []  # every broker a test started here; conftest stops them all at teardown


def started(broker: Broker) -> Broker:
    """Start ``broker`` (start() itself retries a port taken meanwhile) and leave its stop to the conftest."""
    STARTED.append(broker)
    return broker.start(BOOT_S)


def master(tmp_path: Path, ns: Namesrv, name: str, role: str = "SYNC_MASTER", sub: str = "m", **conf) -> Broker:
    conf.setdefault("mappedFileSizeCommitLog", SMALL_FILE)
    return started(Broker(tmp_path / sub, name=name, namesrv_addr=ns.addr, role=role, **conf))


def slave(tmp_path: Path, ns: Namesrv, name: str, broker_id: int = 1, sub: str = "s", **conf) -> Broker:
    conf.setdefault("mappedFileSizeCommitLog", SMALL_FILE)
    conf.setdefault("slaveSynchronizeInterval", 1000)
    return started(Broker(tmp_path / sub, name=name, namesrv_addr=ns.addr, role="SLAVE", broker_id=broker_id,
                          **conf))


async def ha(client: BrokerClient) -> HAStatus:
    """GET_BROKER_HA_STATUS (907), read with the SDK's parser (the attribute names mqctl uses)."""
    resp = await client.request(RequestCode.GET_BROKER_HA_STATUS)
    assert resp.code == 0, resp.remark
    return parse_ha_status(resp.body_bytes())


async def slave_states(mc: BrokerClient) -> dict[int, str]:
    """brokerId -> OK / FALL_BEHIND / DISCONNECTED, as the master's HA status shows its slaves."""
    return {s.broker_id: s.state for s in (await ha(mc)).slaves}


async def wait_slaves_ok(mc: BrokerClient, ids: tuple[int, ...] = (1,), timeout_s: float = 30) -> None:
    async def ok() -> bool:
        states = await slave_states(mc)
        return all(states.get(i) == "OK" for i in ids)

    await async_wait_until(ok, timeout_s, f"slaves {ids} connected to the master's HA port and OK", 0.1)


async def wait_caught_up(mc: BrokerClient, sc: BrokerClient, timeout_s: float = 30) -> int:
    """Wait until the slave's commitlog ends where the master's does and both dispatched it; returns that end."""
    async def equal() -> int | bool:
        m, s = await ha(mc), await ha(sc)
        if m.commitlog_max_offset != s.commitlog_max_offset:
            return False
        for c in (mc, sc):
            if (await c.runtime_info()).get("dispatchBehindBytes") != "0":
                return False
        return m.commitlog_max_offset or True

    return await async_wait_until(equal, timeout_s, "the slave's commitlog to reach the master's end, dispatched", 0.1)


async def wait_slave_knows_topic(sc: BrokerClient, topic: str, timeout_s: float = 30) -> None:
    async def known() -> bool:
        return (await sc.pull("probe-group", topic, 0, 0, 1)).code != TOPIC_NOT_EXIST

    await async_wait_until(known, timeout_s, f"the slave to sync topic {topic} from the master", 0.2)


def commitlog_range(broker: Broker, start: int, end: int, file_size: int = SMALL_FILE) -> bytes:
    """Bytes [start, end) of a broker's commitlog, read from its files (<20-digit start offset> names)."""
    out = bytearray()
    pos = start
    while pos < end:
        base = pos - pos % file_size
        path = broker.store_dir / "commitlog" / f"{base:020d}"
        with open(path, "rb") as fh:
            fh.seek(pos - base)
            chunk = fh.read(min(end, base + file_size) - pos)
        assert chunk, f"{path} has no bytes at {pos}"
        out += chunk
        pos += len(chunk)
    return bytes(out)


def commitlog_files(broker: Broker) -> list[str]:
    return sorted(p.name for p in (broker.store_dir / "commitlog").iterdir() if p.name.isdigit())


async def send_batches(client: BrokerClient, topic: str, queues: int, batches: int, per_batch: int, prefix: str,
                       body_size: int = 200) -> list[tuple[str, int]]:
    """Send ``batches`` batches round-robin over the queues; returns (id, response code) per message."""
    out = []
    for b in range(batches):
        ids = [f"{prefix}-{b}-{k}" for k in range(per_batch)]
        msgs = [message(i.encode() + b"." * body_size, UNIQ_KEY=i) for i in ids]
        resp = await client.send(topic, b % queues, msgs)
        out.extend((i, resp.code) for i in ids)
    return out


async def drain(client: BrokerClient, topic: str, queues: int, group: str = "drain-group") -> dict[int, list]:
    """Every message of every queue, by queue id, read from this one node (no offset commit)."""
    return {q: await client.pull_all(group, topic, q) for q in range(queues)}


def ids_of(by_queue: dict[int, list]) -> list[str]:
    return [m.properties.get("UNIQ_KEY", "") for q in sorted(by_queue) for m in by_queue[q]]


def elapsed_ms(t0: float) -> float:
    return (time.monotonic() - t0) * 1000


def slave_sync_rounds(broker: Broker) -> int:
    """Successful whole metadata-sync rounds of a slave, from its Prometheus endpoint."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("rocketmq_slave_sync_runs_total{") and '"all"' in line and '"success"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def wait_sync_rounds(broker: Broker, rounds: int = 2, timeout_s: float = 20) -> None:
    """Wait for ``rounds`` more successful metadata-sync rounds of a slave."""
    import asyncio

    start = await asyncio.to_thread(slave_sync_rounds, broker)

    async def done() -> bool:
        return await asyncio.to_thread(slave_sync_rounds, broker) >= start + rounds

    await async_wait_until(done, timeout_s, f"{rounds} more successful slave sync rounds (from {start})", 0.2)


async def delay_offsets(client: BrokerClient) -> dict[str, int]:
    """GET_ALL_DELAY_OFFSET (45): level -> the schedule service's next offset in that level's queue."""
    resp = await client.request(RequestCode.GET_ALL_DELAY_OFFSET)
    assert resp.code == 0, resp.remark
    return fastjson.loads(resp.body_bytes())["offsetTable"]


async def delayed_and_pushed(mc: BrokerClient, sc: BrokerClient, topic: str, totals: tuple[int, ...] = (5, 8)) -> None:
    """Delay level 1 messages (due in 1 s) to ``topic`` queue 0 on the master, in steps up to each of ``totals``; after
    each step the level's offset must be on the slave within a second of the master's delivery. Call it with the
    slave's round far away and once the slave synced the topic: at most one round runs after that (the one at 3 s or
    the one run on learning the master, whichever came second), so only the master's push passes both steps."""
    delivered_before = 0
    for total in totals:
        sent = [message(b"%d" % i, DELAY="1") for i in range(delivered_before, total)]
        assert (await mc.send(topic, 0, sent)).code == 0

        async def at_total(node: BrokerClient = mc, want: int = total) -> bool:
            # the level's offset moves once the store took the copies (SYNC_MASTER: the slave too)
            return (await delay_offsets(node)).get("1") == want

        await async_wait_until(at_total, 20, f"delay level 1 at offset {total} on the master (delivered)", 0.02)
        delivered_at = time.monotonic()
        await async_wait_until(lambda: at_total(sc), 5, f"delay level 1 at offset {total} on the slave", 0.02)
        lag_s = time.monotonic() - delivered_at
        assert lag_s < 1.0, f"the slave took delay offset {total} {lag_s:.2f} s after the master's delivery"
        delivered_before = total
