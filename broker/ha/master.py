"""The master's HA server: accept slaves on ``haListenPort``, check their hello, run one connection each.

Every master (SYNC or ASYNC) listens on ``0.0.0.0:haListenPort``. A peer must open with a hello (``ha_codec``)
within ``HELLO_TIMEOUT_S``; a missing or bad hello, a wrong cluster/brokerName, a brokerId <= 0 or a bad HMAC is
answered with a PEER_REFUSED error frame and closed: it never becomes a connection and never counts as an ack
(RocketMQ #3015). A second connection with the same brokerId replaces the older one (the older is closed), so
every connection is a different slave (RocketMQ's own TODO).

``push2slave_max_offset`` is the highest ack of any slave, monotonic for the master's life; each rise is passed
to ``on_ack_listener`` (the group transfer). ``links`` keeps the last state of every slave seen, for
``ha status``. Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from broker.config import MessageStoreConfig
from broker.ha.connection import MasterConnection
from broker.ha.state import CloseReason, ConnState, HACounters, SlaveLink, check_hello
from remoting.ha_codec import ErrorCode, ProtocolError, encode_error, read_hello

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64  # slaves per master; beyond it peers are refused (a bound on accepted sockets)
MAX_LINKS_KEPT = 64
CATCH_UP_LAG_BYTES = 16 * 1024 * 1024


class HAMaster:
    def __init__(self, *, store, store_config: MessageStoreConfig, cluster: str, broker_name: str, port: int,
                 host: str = "0.0.0.0", counters: HACounters | None = None,
                 on_ack_listener: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.store_config = store_config
        self.cluster = cluster
        self.broker_name = broker_name
        self.host = host
        self.port = port
        self.counters = counters or HACounters()
        self.on_ack_listener = on_ack_listener
        self.push2slave_max_offset = 0
        self.connections: dict[int, MasterConnection] = {}  # brokerId -> live connection
        self.links: dict[int, SlaveLink] = {}  # brokerId -> last known state
        self.use_sendfile = True
        self.use_sendfile_thread = True  # False: catch-up frames go one by one through loop.sendfile
        # Below this lag frames go through the transport (one copy, no thread hop); at or above it the slave is
        # catching up and a worker thread sendfiles batches. Waking a thread for a small lag costs more than the
        # copy: the GIL hand-off delays the event loop by milliseconds (measured: SYNC puts 3x slower).
        self.sendfile_min_lag = max(CATCH_UP_LAG_BYTES, 4 * store_config.ha_transfer_batch_size)
        self._server: asyncio.AbstractServer | None = None
        self._handshakes: set[asyncio.Task] = set()
        self._listening = False

    # lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._on_client, self.host, self.port, limit=1 << 20,
                                                      reuse_address=True)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen for slaves on HA port {self.host}:{self.port}: {exc.strerror}; "
                                     "free the port or set haListenPort") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        self._listening = True
        self.store.add_append_listener(self._on_append)
        log.info("HA master of %s/%s listening on %s:%d (haSlaveCatchUpFrom=%s, auth=%s)", self.cluster,
                 self.broker_name, self.host, self.port, self.store_config.ha_slave_catch_up_from.value,
                 "HMAC" if self.store_config.ha_auth_secret else "off")

    async def stop(self) -> None:
        self._listening = False
        if self._server is not None:
            self._server.close()
        for task in list(self._handshakes):
            task.cancel()
        conns = list(self.connections.values())
        for conn in conns:
            conn.close(CloseReason.SHUTDOWN)
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()
            self._server = None

    # state -----------------------------------------------------------------------------------------------
    def connected_slaves(self) -> int:
        return len(self.connections)

    def on_ack(self, offset: int) -> None:
        self.counters.acks += 1
        if offset > self.push2slave_max_offset:
            self.push2slave_max_offset = offset
            if self.on_ack_listener is not None:
                self.on_ack_listener(offset)

    def on_transfer_started(self, conn: MasterConnection) -> None:
        # The first report counts as an ack once it is known to lie inside the master's range.
        self.on_ack(conn.link.request_offset)

    def on_connection_closed(self, conn: MasterConnection) -> None:
        self.counters.closed += 1
        if self.connections.get(conn.link.broker_id) is conn:
            del self.connections[conn.link.broker_id]

    def _on_append(self, max_offset: int) -> None:
        for conn in self.connections.values():
            conn.wake.set()

    # accept ----------------------------------------------------------------------------------------------
    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handshakes.add(task)
        try:
            await self._handshake(reader, writer)
        finally:
            if task is not None:
                self._handshakes.discard(task)

    def _refuse(self, writer: asyncio.StreamWriter, peer: str, message: str) -> None:
        self.counters.refused += 1
        self.counters.error_frames_sent += 1
        log.warning("HA peer %s refused: %s", peer, message)
        with contextlib.suppress(Exception):
            writer.write(encode_error(ErrorCode.PEER_REFUSED, message, master_min=self.store.min_phy_offset,
                                      master_max=self.store.max_phy_offset))
            writer.close()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        if not self._listening:
            writer.close()
            return
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                hello = await read_hello(reader)
        except TimeoutError:
            self._refuse(writer, peer, f"no hello within {HELLO_TIMEOUT_S:.0f} s; a pyrmq slave opens with one")
            return
        except ProtocolError as exc:
            if exc.field == "hello" and exc.value == 0:
                # connected and closed without a byte: a port probe or health check, not a slave
                log.debug("HA peer %s closed before sending a hello (port probe?)", peer)
                writer.close()
                return
            self._refuse(writer, peer, exc.message)
            return
        except (ConnectionError, OSError) as exc:
            log.info("HA peer %s went away during the hello: %r", peer, exc)
            writer.close()
            return
        refusal = check_hello(hello, cluster=self.cluster, broker_name=self.broker_name,
                              secret=self.store_config.ha_auth_secret, now_ms=int(time.time() * 1000))
        if refusal is not None:
            self._refuse(writer, peer, refusal.message)
            return
        if len(self.connections) >= MAX_CONNECTIONS and hello.broker_id not in self.connections:
            self._refuse(writer, peer, f"this master already serves {MAX_CONNECTIONS} slaves")
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket as _socket

            with contextlib.suppress(OSError):
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        old = self.connections.pop(hello.broker_id, None)
        if old is not None:
            self.counters.replaced += 1
            log.warning("HA slave brokerId %d connected again from %s; closing its older connection from %s",
                        hello.broker_id, peer, old.link.slave_addr)
            old.close(CloseReason.REPLACED)
        link = SlaveLink(slave_addr=peer, broker_id=hello.broker_id, connected_at_ms=int(time.time() * 1000))
        conn = MasterConnection(self, reader, writer, link)
        self.connections[hello.broker_id] = conn
        self.links[hello.broker_id] = link
        if len(self.links) > MAX_LINKS_KEPT:
            for bid in [b for b, lk in self.links.items() if lk.state is ConnState.CLOSED][: len(self.links) - MAX_LINKS_KEPT]:
                del self.links[bid]
        self.counters.accepted += 1
        log.info("HA slave %s/%s brokerId %d connected from %s", hello.cluster, hello.broker_name, hello.broker_id, peer)
        conn.start()
