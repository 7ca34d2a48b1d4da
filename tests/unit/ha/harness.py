"""In-process replication harness (RocketMQ HATest): real MessageStores on temp dirs, real loopback sockets.

``Node`` = one MessageStore + one HAService with small commitlog files. Helpers compare the stores byte by byte
and wait with bounds (``async_wait_until``).
"""

from __future__ import annotations

import asyncio
import filecmp
import os
import socket
from dataclasses import replace
from pathlib import Path

from broker.config import BrokerConfig, BrokerRole, BrokerSettings, CatchUpFrom, MessageStoreConfig
from broker.ha.service import HAService
from broker.store.message_store import MessageStore
from broker.store.types import MessageDraft
from remoting import ha_codec, ha_handshake
from harness.waiting import async_wait_until

FILE_SIZE = 1024 * 1024
CLUSTER = "TestCluster"
BROKER = "broker-a"
SECRET = "harness-ha-secret-0123456789"  # every node's haAuthSecret unless a test passes another (or "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settings(root: Path, role: BrokerRole, *, broker_id: int = 0, ha_port: int = 0, master_addr: str = "",
             **store_kw) -> BrokerSettings:
    store_kw.setdefault("mapped_file_size_commit_log", FILE_SIZE)
    store_kw.setdefault("mapped_file_size_consume_queue", 20 * 4096)
    store_kw.setdefault("warm_mapped_file_enable", False)
    store_kw.setdefault("ha_auth_secret", SECRET)
    store = MessageStoreConfig(store_path_root_dir=str(root), broker_role=role, ha_listen_port=ha_port or free_port(),
                               ha_master_address=master_addr, **store_kw)
    broker = BrokerConfig(broker_cluster_name=CLUSTER, broker_name=BROKER, broker_id=broker_id,
                          broker_ip1="127.0.0.1", listen_port=free_port())
    return BrokerSettings(broker=broker, store=store)


class Node:
    RUNNING: list[Node] = []  # started, not stopped; tests/unit/ha/conftest.py stops the rest after each test

    def __init__(self, s: BrokerSettings) -> None:
        self.settings = s
        self.store = MessageStore(s.store, store_host=("127.0.0.1", s.broker.listen_port))
        self.ha = HAService(s, self.store, listen_host="127.0.0.1")

    @property
    def ha_addr(self) -> str:
        return f"127.0.0.1:{self.ha.ha_port}"

    async def start(self) -> Node:
        await self.store.start()
        await self.ha.start()
        Node.RUNNING.append(self)
        return self

    async def stop(self) -> None:
        if self in Node.RUNNING:
            Node.RUNNING.remove(self)
        await self.ha.stop()
        await self.store.stop()

    def restarted(self, **store_kw) -> Node:
        s = self.settings
        return Node(replace(s, store=replace(s.store, **store_kw)) if store_kw else s)


async def master(root: Path, role: BrokerRole = BrokerRole.SYNC_MASTER, **kw) -> Node:
    return await Node(settings(root, role, **kw)).start()


async def slave(root: Path, master_node: Node | None = None, *, master_addr: str = "", broker_id: int = 1,
                **kw) -> Node:
    addr = master_addr or (master_node.ha_addr if master_node else "")
    return await Node(settings(root, BrokerRole.SLAVE, broker_id=broker_id, master_addr=addr, **kw)).start()


def drafts(n: int, size: int = 1000, tag: str = "T") -> list[MessageDraft]:
    return [MessageDraft(body=os.urandom(size), properties={"TAGS": tag}) for _ in range(n)]


async def put(node: Node, n: int = 10, size: int = 1000, topic: str = "TopicTest", queue_id: int = 0):
    return await node.store.put_messages(topic, queue_id, drafts(n, size))


async def fill(node: Node, total_bytes: int, *, batch: int = 50, size: int = 1000, queues: int = 4) -> None:
    """Append at least ``total_bytes`` (statuses ignored: a SYNC master may answer SLAVE_NOT_AVAILABLE)."""
    i = 0
    while node.store.max_phy_offset < total_bytes:
        await put(node, batch, size, queue_id=i % queues)
        i += 1


async def wait_caught_up(m: Node, s: Node, timeout_s: float = 20.0) -> None:
    await async_wait_until(lambda: s.store.max_phy_offset == m.store.max_phy_offset, timeout_s,
                           lambda: f"slave max {s.store.max_phy_offset} != master max {m.store.max_phy_offset}")
    await async_wait_until(lambda: s.store.dispatched_phy_offset == s.store.max_phy_offset, timeout_s,
                           lambda: f"slave dispatched {s.store.dispatched_phy_offset} of {s.store.max_phy_offset}")


def commitlog_files(node: Node) -> list[Path]:
    return sorted(p for p in node.settings.store.commitlog_dir.iterdir() if p.name.isdigit())


def assert_commitlogs_identical(m: Node, s: Node) -> None:
    """Every slave file holding data equals the master file of the same name, byte for byte."""
    mfiles = {p.name: p for p in commitlog_files(m)}
    sfiles = commitlog_files(s)
    assert sfiles, "slave has no commitlog files"
    for sf in sfiles:
        if int(sf.name) >= s.store.max_phy_offset:
            continue  # a pre-allocated next file: nothing written yet
        assert sf.name in mfiles, f"slave file {sf.name} has no master twin ({sorted(mfiles)})"
        assert filecmp.cmp(sf, mfiles[sf.name], shallow=False), f"commitlog file {sf.name} differs"


def cq_files(node: Node) -> dict[str, bytes]:
    root = node.settings.store.consume_queue_dir
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name.isdigit():
            out[str(p.relative_to(root))] = p.read_bytes().rstrip(b"\x00")
    return out


class RawPeer:
    """A hand-driven HA client over a real socket (impostors, protocol edge cases).

    ``handshake()`` is what a real slave does (hello, check nothing, answer the challenge with the proof of
    ``secret``); ``hello()`` alone is what an impostor can do. Frames read but not yet returned stay in ``pending``.
    Every peer a test opens is in ``OPEN`` until closed; tests/unit/ha/conftest.py closes the rest after each test.
    """

    OPEN: set[RawPeer] = set()

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = ha_codec.FrameDecoder(32 * 1024)
        self.pending: list = []
        self.hello_raw = b""
        self.last_challenge: ha_codec.Challenge | None = None

    @classmethod
    async def connect(cls, addr: str) -> RawPeer:
        host, _, port = addr.rpartition(":")
        r, w = await asyncio.open_connection(host, int(port))
        peer = cls(r, w)
        cls.OPEN.add(peer)
        return peer

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def hello(self, *, broker_id: int = 1, cluster: str = CLUSTER, broker_name: str = BROKER) -> None:
        self.hello_raw = ha_handshake.encode_hello(broker_id=broker_id, cluster=cluster, broker_name=broker_name,
                                                   nonce=os.urandom(ha_handshake.NONCE_BYTES))
        self.send(self.hello_raw)

    async def next_frame(self, timeout_s: float = 5.0):
        """The next frame (a Challenge, an ErrorFrame or a Frame); None at EOF or after ``timeout_s``."""
        if not self.pending:
            self.pending = await self.frames(timeout_s, until_frames=1)
        return self.pending.pop(0) if self.pending else None

    async def handshake(self, *, secret: str = SECRET, **hello_kw) -> ha_codec.Challenge:
        """Hello, then answer the challenge with ``secret``'s proof (none when the master asks for none)."""
        self.hello(**hello_kw)
        challenge = await self.next_frame()
        assert isinstance(challenge, ha_codec.Challenge), f"expected a challenge, got {challenge!r}"
        self.last_challenge = challenge
        if challenge.auth:
            self.send(ha_handshake.slave_proof(secret.encode(), self.hello_raw, challenge.nonce))
        return challenge

    async def frames(self, timeout_s: float = 5.0, *, until_bytes: int = 0, until_frames: int = 0) -> list:
        """Read frames until EOF, ``until_bytes`` of bodies, ``until_frames`` frames or the timeout."""
        out: list = self.pending
        self.pending = []
        got = sum(len(f.body) for f in out if isinstance(f, ha_codec.Frame))
        try:
            async with asyncio.timeout(timeout_s):
                while not (until_frames and len(out) >= until_frames):
                    data = await self.reader.read(1 << 20)
                    if not data:
                        return out
                    self.decoder.feed(data)
                    for f in self.decoder.frames():
                        out.append(f)
                        if isinstance(f, ha_codec.Frame):
                            got += len(f.body)
                    if until_bytes and got >= until_bytes:
                        return out
        except (TimeoutError, ConnectionError):
            pass
        return out

    async def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                while await self.reader.read(1 << 16):
                    pass
            return True
        except ConnectionError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        RawPeer.OPEN.discard(self)
        self.writer.close()


__all__ = ["BrokerRole", "CatchUpFrom"]
