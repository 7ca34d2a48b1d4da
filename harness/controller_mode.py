"""A controller-mode cluster as real processes: a nameserver running the controller (``enableControllerInNamesrv``)
on one etcd, and broker groups of controller-mode brokers (``enableControllerMode``) whose roles the controller
decides. Fast timings for tests and benches: heartbeats every 200 ms, a silent broker dead after 1.5 s."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from client import Message, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus
from controller.client import ControllerClient, ReplicaInfo
from harness.checker import Outcome, Read, Send, SendOk, check
from harness.controller import FAST
from harness.procs import Broker, Namesrv
from harness.waiting import async_wait_until
from remoting.message_codec.ids import parse_offset_msg_id

BROKER_FAST = {
    "controllerHeartBeatTimeoutMills": 1500,
    "brokerHeartbeatInterval": 200,
    "checkSyncStateSetPeriod": 200,
    "controllerFenceMarginMills": 500,
    "slaveSynchronizeInterval": 500,
    "slaveTimeout": 1500,
}


def controller_namesrv(workdir: Path, etcd_endpoint: str, *, instance_id: str = "ns-controller",
                       **conf: object) -> Namesrv:
    return Namesrv(workdir, enableControllerInNamesrv=True, controllerStoreEtcdEndpoints=etcd_endpoint,
                   controllerInstanceId=instance_id, **{**FAST, **conf})


def controller_broker(workdir: Path, ns: Namesrv, name: str, index: int, *, ns_addr: str = "", **conf: object
                      ) -> Broker:
    """Broker ``index`` of group ``name`` (its id comes from the controller; ``index`` only names its files).
    ``ns_addr``: the nameserver's (and controller's) address as this broker reaches it (default ``ns.addr``)."""
    addr = ns_addr or ns.addr
    values = {"enableControllerMode": True, "controllerAddr": addr, **BROKER_FAST, **conf}
    return Broker(workdir / f"{name}-{index}", name=name, namesrv_addr=addr, broker_id=index, **values)


async def replica_info(ns: Namesrv, name: str) -> ReplicaInfo:
    client = ControllerClient([ns.addr])
    try:
        return await client.replica_info(name)
    finally:
        await client.close()


async def master_first(ns: Namesrv, name: str, brokers: list[Broker]) -> list[Broker]:
    """``brokers`` reordered so that the one the controller names master comes first: on a loaded machine the first
    broker started may have lost its role (a late heartbeat) before the others joined, and a test that writes to
    "the master" must write to the real one."""
    info = await replica_info(ns, name)
    master = [b for b in brokers if b.addr == info.master_address]
    assert master, f"the controller names {info.master_address}, none of {[b.addr for b in brokers]}"
    return master + [b for b in brokers if b is not master[0]]


def sync_state_set_is(ns: Namesrv, name: str, members: set[int]):
    """A condition for ``async_wait_until``: the group's SyncStateSet is ``members``."""

    async def check() -> bool:
        return (await replica_info(ns, name)).sync_state_set == members

    return check


@asynccontextmanager
async def group_of_three(workdir: Path, ns: Namesrv, name: str, *, join_timeout_s: float = 20,
                         **conf: object) -> AsyncIterator[list[Broker]]:
    """Brokers 1, 2 and 3 of group ``name`` (``conf`` for each), started and all three in the SyncStateSet within
    ``join_timeout_s``, the master first (``master_first``); on exit each is resumed (a test may leave one paused)
    and stopped."""
    brokers = [controller_broker(workdir, ns, name, i, **conf) for i in (1, 2, 3)]
    try:
        for b in brokers:
            b.start()
        await async_wait_until(sync_state_set_is(ns, name, {1, 2, 3}), join_timeout_s,
                               "the slaves join the SyncStateSet")
        yield await master_first(ns, name, brokers)
    finally:
        for b in brokers:
            b.resume()
            b.stop()


def commitlog_bytes(broker: Broker) -> bytes:
    """The broker's whole commitlog as written (trailing zeros of the last file dropped)."""
    files = sorted(f for f in (broker.store_dir / "commitlog").iterdir() if f.name.isdigit())
    return b"".join(f.read_bytes() for f in files).rstrip(b"\0")


def log_differences(master: Broker, others: list[Broker]) -> str:
    want = commitlog_bytes(master)
    out = []
    for b in others:
        got = commitlog_bytes(b)
        first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        out.append(f"{b.addr}: {len(got)} bytes vs {len(want)}, first difference at {first}")
    return "; ".join(out)


class SendLog:
    """A controller-mode test's sends as ``harness.checker`` takes them: the outcome of every id, and every SEND_OK
    with the broker that answered it (from its offsetMsgId, or the address a direct send went to) and the client's
    send and answer times, for the split-brain check. Ids are the body up to the first '|'."""

    def __init__(self, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self.sends: list[Send] = []
        self.oks: list[SendOk] = []

    def record(self, ident: str, writer: str, outcome: Outcome, *, broker: str = "", sent: float = 0.0,
               detail: str = "", offset: int | None = None) -> None:
        self.sends.append(Send(ident, writer, len(self.sends), outcome, offset, detail=detail[:120]))
        if outcome is Outcome.ACKED:
            self.oks.append(SendOk(self.group, broker, sent, time.monotonic(), ident, None, offset))

    async def produce(self, producer: Producer, ident: str) -> SendStatus | None:
        """A send through the SDK producer (it follows the route); None when no answer came."""
        sent = time.monotonic()
        try:
            result = await producer.send(Message(self.topic, ident.encode() + b"|"))
        except Exception as exc:  # noqa: BLE001 - no answer: it may or may not be stored
            self.record(ident, "producer", Outcome.UNKNOWN, detail=str(exc))
            return None
        ok = result.status is SendStatus.SEND_OK
        (ip, port), offset = parse_offset_msg_id(result.offset_msg_id)
        self.record(ident, "producer", Outcome.ACKED if ok else Outcome.WEAK, broker=f"{ip}:{port}", sent=sent,
                    detail=f"{result.status.name} from {ip}:{port}", offset=offset)
        return result.status

    def report(self, reads: list[Read]):
        return check(self.sends, reads, send_oks=self.oks)


def _id_before_bar(body: bytes) -> str:
    return body.split(b"|", 1)[0].decode()


async def drain(ns_addr: str, topic: str, broker_name: str, queues: int, *,
                ident: Callable[[bytes], str] = _id_before_bar, consumer_group: str = "") -> list[Read]:
    """Every message of ``topic``'s queues 0..queues-1 on ``broker_name`` the consumer side sees now (its master, or
    a slave while it has none), as ``harness.checker`` Reads whose ids ``ident`` takes from the bodies (default: the
    body up to the first '|', as ``SendLog`` writes them). ``consumer_group`` defaults to ``drain-<broker_name>``."""
    reads: list[Read] = []
    async with PullConsumer(consumer_group or f"drain-{broker_name}", ns_addr) as consumer:
        for q in range(queues):
            offset = 0
            while True:
                result = await consumer.pull(MessageQueue(topic, broker_name, q), offset, max_nums=32, timeout_s=5)
                if result.status is not PullStatus.FOUND:
                    break
                reads += [Read(ident(m.body), f"{topic}:{q}", m.queue_offset) for m in result.messages]
                offset = result.next_begin_offset
    return reads
