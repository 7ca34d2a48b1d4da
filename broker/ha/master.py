"""The master's HA server: accept slaves on ``haListenPort``, authenticate them, run one connection each.

Every master (SYNC or ASYNC) listens on ``0.0.0.0:haListenPort``. The handshake (``ha_handshake``), bounded by
``HANDSHAKE_TIMEOUT_S`` as a whole:
1. the peer's hello names this broker group and a brokerId >= 1, else it is refused;
2. the master answers a challenge: a fresh nonce and, with a secret, its own proof (so a slave never streams from
   an impostor);
3. with a secret, the peer must answer with its proof over both nonces; a wrong or missing proof is refused.
A refused peer gets one PEER_REFUSED error frame with a generic message and no offsets (``REFUSED_TO_PEER``; the
details go to this log), is closed, and never becomes a connection or a row of ``haStatus``: nothing it sends
counts as an ack (RocketMQ #3015). Without a secret (an ASYNC_MASTER without one, or a SYNC_MASTER with
``haUnsafeAllowUnauthenticatedSlaves``) step 3 is skipped and any peer with a matching hello is served.

One live connection per brokerId (``state.admit``), never displaced while it lives: a newcomer claiming its
brokerId gets it only once the live one read nothing for ``haHousekeepingInterval`` (proven dead). A second
claimant that proved the secret while the first still reads is an alarm (an ERROR line, rate-limited, and
``counters.duplicate_claims``, exported as ``rocketmq_ha_duplicate_slave_claims_total``) and is refused: the
secret proves membership of the cluster, not being that slave, and a swap would hand SYNC acks to the newcomer.

Handshake slots (``common.silent_slots``): at most ``MAX_HANDSHAKES_PER_HOST`` per source address; addresses a
slave authenticated from draw from ``RESERVED_HANDSHAKES`` slots of their own, every other address shares
``MAX_HANDSHAKES``; when they are taken, the oldest handshake that sent no hello yet gives its slot to a newcomer,
and the hello is due within ``HELLO_TIMEOUT_S``. So silent sockets cannot lock a real slave out (issue 22 item 2). At most
``MAX_CONNECTIONS`` slaves are served. Refusals and evictions are logged through ``RateLimitedLog`` (a peer can
cause them at will).

``push2slave_max_offset`` is the highest ack of any slave, monotonic for the master's life; each rise is passed
to ``on_ack_listener`` (the group transfer). ``links`` keeps the last state of every slave served, for
``haStatus``; a departed slave's row leaves ``haDisconnectedSlaveKeepInterval`` after its close
(``visible_links``). Task-safety: event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable

from broker.config import MessageStoreConfig
from broker.ha.connection import MasterConnection, TransferPolicy
from broker.ha.state import (
    REFUSED_TO_PEER,
    Admission,
    CloseReason,
    ConnState,
    HACounters,
    SlaveLink,
    admit,
    check_hello,
    proof_matches,
)
from common.log import RateLimitedLog
from common.silent_slots import Place, SilentSlots, SlotVerdict
from remoting.tls import TlsConfig, TlsMode
from remoting.tls_listener import GuardedListener
from remoting.ha_codec import ErrorCode, encode_error
from remoting.ha_handshake import (
    CHALLENGE_NONCE_BYTES,
    Hello,
    encode_challenge,
    master_proof,
    read_hello,
    read_proof,
    slave_proof,
)
from remoting.ha_wire import ProtocolError

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 3.0  # hello, challenge and proof together (a slave answers each at once: one round trip)
HELLO_TIMEOUT_S = 1.0  # a slave sends its hello with its connect
MAX_HANDSHAKES = 64  # handshakes in progress from addresses no slave authenticated from (a bound on idle sockets)
RESERVED_HANDSHAKES = 16  # kept for addresses a slave authenticated from before
MAX_HANDSHAKES_PER_HOST = 4  # per source address (a slave needs one; a restarting one briefly two)
LOG_EVERY_S = 10.0  # refusal and eviction lines: at most one per kind per interval, with the count left out
MAX_CONNECTIONS = 64  # slaves per master; beyond it peers are refused (a bound on accepted sockets)
MAX_LINKS_KEPT = 64


class HAMaster:
    def __init__(self, *, store, store_config: MessageStoreConfig, cluster: str, broker_name: str, port: int,
                 secret: bytes = b"", host: str = "0.0.0.0", counters: HACounters | None = None,
                 on_ack_listener: Callable[[int], None] | None = None, tls: TlsConfig | None = None) -> None:
        self.store = store
        # tls.server.mode permissive/enforcing: the HA port sorts TLS from plaintext as the remoting ports do
        self.tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        self.store_config = store_config
        self.secret = secret  # b"": serve any peer with a matching hello (unsafe; service.py says so at start)
        self.keep_departed_s = store_config.ha_disconnected_slave_keep_interval / 1000.0
        self.cluster = cluster
        self.broker_name = broker_name
        self.host = host
        self.port = port
        self.counters = counters or HACounters()
        self.on_ack_listener = on_ack_listener
        # called on every accepted ack, advancing the maximum or not (controller mode counts acks per member)
        self.ack_observers: list[Callable[[], None]] = []
        self.push2slave_max_offset = 0
        self.connections: dict[int, MasterConnection] = {}  # brokerId -> live connection
        self.links: dict[int, SlaveLink] = {}  # brokerId -> last known state
        self.policy = TransferPolicy.from_config(store_config)  # read by every connection
        self._server: asyncio.AbstractServer | GuardedListener | None = None
        self.slots = SilentSlots(total=MAX_HANDSHAKES, per_host=MAX_HANDSHAKES_PER_HOST,
                                 reserved=RESERVED_HANDSHAKES)
        self._handshakes: dict[Place, tuple[asyncio.Task | None, asyncio.StreamWriter]] = {}
        self._listening = False
        self._slot_log = RateLimitedLog(log, LOG_EVERY_S)  # peers closed at once or evicted
        self._refusal_log = RateLimitedLog(log, LOG_EVERY_S)  # handshakes refused or abandoned
        self._duplicate_log = RateLimitedLog(log, LOG_EVERY_S)  # two live claimants of one brokerId (ERROR)

    # lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.tls is not None:
            await self._start_tls(self.tls)
            return
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
                 "HMAC-SHA256 challenge" if self.secret else "OFF: any peer with a matching hello is served")

    async def _start_tls(self, tls: TlsConfig) -> None:
        context = tls.server_context()
        assert context is not None

        def factory() -> asyncio.StreamReaderProtocol:  # what asyncio.start_server builds per connection
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=1 << 20), self._on_client)

        listener = GuardedListener(f"HA master of {self.broker_name}", self.host, self.port, mode=tls.mode,
                                   context=context, protocol_factory=factory,
                                   handshake_timeout_s=tls.handshake_timeout_s, max_pending=MAX_HANDSHAKES,
                                   on_refused=self._tls_refused)
        try:
            self.port = await listener.start()
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen for slaves on HA port {self.host}:{self.port}: {exc.strerror}; "
                                     "free the port or set haListenPort") from exc
        self._server = listener
        self._listening = True
        self.store.add_append_listener(self._on_append)
        log.info("HA master of %s/%s listening on %s:%d with TLS %s (auth=%s)", self.cluster, self.broker_name,
                 self.host, self.port, tls.mode.value, "HMAC-SHA256 challenge" if self.secret else "OFF")

    def _tls_refused(self, reason: str) -> None:
        self.counters.refused += 1

    async def stop(self) -> None:
        self._listening = False
        if self._server is not None:
            self._server.close()
        for task, _writer in list(self._handshakes.values()):
            if task is not None:
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

    @property
    def handshakes_in_progress(self) -> int:
        return len(self.slots)

    def on_ack(self, offset: int) -> None:
        self.counters.acks += 1
        for observer in self.ack_observers:
            observer()
        if offset > self.push2slave_max_offset:
            self.push2slave_max_offset = offset
            if self.on_ack_listener is not None:
                self.on_ack_listener(offset)

    def on_connection_closed(self, conn: MasterConnection) -> None:
        self.counters.closed += 1
        conn.link.closed_mono = time.monotonic()
        if self.connections.get(conn.link.broker_id) is conn:
            del self.connections[conn.link.broker_id]

    def visible_links(self, now_mono: float | None = None) -> list[SlaveLink]:
        """The rows of ``haStatus``: live slaves, and departed ones for ``haDisconnectedSlaveKeepInterval`` after
        their close (then dropped, so a slave that left, or was replaced, does not stay listed for ever)."""
        now = time.monotonic() if now_mono is None else now_mono
        expired = [bid for bid, lk in self.links.items()
                   if lk.state is ConnState.CLOSED and now - lk.closed_mono >= self.keep_departed_s]
        for bid in expired:
            del self.links[bid]
        return list(self.links.values())

    def _on_append(self, max_offset: int) -> None:
        for conn in self.connections.values():
            conn.wake.set()

    # accept ----------------------------------------------------------------------------------------------
    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer(writer)
        host = peer.rpartition(":")[0]
        verdict, mine, victim = self.slots.claim(host, time.monotonic())
        if mine is None:
            self.counters.refused += 1
            why = (f"{MAX_HANDSHAKES_PER_HOST} handshakes from {host} already in progress, each past its hello"
                   if verdict is SlotVerdict.HOST_FULL else "every handshake slot is taken by a peer that talks")
            self._slot_log.warning("HA peer %s closed at once: %s", peer, why)
            writer.close()
            return
        if victim is not None:
            self.counters.handshakes_evicted += 1
            task, victim_writer = self._handshakes.pop(victim, (None, None))
            self._slot_log.warning("HA peer %s sent no hello for %.2f s; closed to make room for %s (silent peers "
                                   "cannot hold the HA port's handshake slots)", _peer(victim_writer) if victim_writer
                                   else victim.host, time.monotonic() - victim.started, peer)
            if victim_writer is not None:
                victim_writer.close()
            if task is not None:
                task.cancel()
        self._handshakes[mine] = (asyncio.current_task(), writer)
        try:
            await self._handshake(reader, writer, mine)
        except asyncio.CancelledError:
            # evicted for a newcomer, or the master stops: the handshake just ends. Not re-raised: this is the top
            # of the connection's task, and Python 3.11's start_server callback calls task.exception() on it,
            # which raises for a cancelled task ("Exception in callback ..." with a CancelledError, per eviction).
            writer.close()
        finally:
            self.slots.release(mine)
            self._handshakes.pop(mine, None)

    def _refuse(self, writer: asyncio.StreamWriter, peer: str, why: str) -> None:
        """Log ``why`` (rate-limited); tell the peer only REFUSED_TO_PEER, without offsets (it has not
        authenticated, or is refused anyway)."""
        self.counters.refused += 1
        self._refusal_log.warning("HA peer %s refused: %s", peer, why)
        self._close_refused(writer)

    def _close_refused(self, writer: asyncio.StreamWriter) -> None:
        self.counters.error_frames_sent += 1
        with contextlib.suppress(Exception):
            writer.write(encode_error(ErrorCode.PEER_REFUSED, REFUSED_TO_PEER))
            writer.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            peer: str, mine: Place) -> Hello | None:
        """Hello, challenge, proof. Returns the hello of a peer that passed; None when it was refused or left."""
        stage = "hello"
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                async with asyncio.timeout(HELLO_TIMEOUT_S):
                    hello = await read_hello(reader)
                mine.spoke = True
                stage = "proof"
                refusal = check_hello(hello, cluster=self.cluster, broker_name=self.broker_name)
                if refusal is not None:
                    self._refuse(writer, peer, refusal.message)
                    return None
                nonce = os.urandom(CHALLENGE_NONCE_BYTES)
                proof = master_proof(self.secret, hello.raw, nonce) if self.secret else None
                writer.write(encode_challenge(nonce, proof))
                if self.secret and not proof_matches(slave_proof(self.secret, hello.raw, nonce),
                                                     await read_proof(reader)):
                    self._refuse(writer, peer, f"brokerId {hello.broker_id} sent a wrong proof: its haAuthSecret "
                                               "differs from this master's (or it is not a slave of this cluster)")
                    return None
                return hello
        except TimeoutError:
            if stage == "hello":
                self._refuse(writer, peer, f"no hello within {HELLO_TIMEOUT_S:.0f} s of the connect (a pyrmq slave "
                                           "sends it at once)")
            else:
                self._refuse(writer, peer, f"handshake not completed within {HANDSHAKE_TIMEOUT_S:.0f} s (a pyrmq "
                                           "slave answers the challenge at once)")
        except ProtocolError as exc:
            if exc.field == "hello" and exc.value == 0:
                # connected and closed without a byte: a port probe or health check, not a slave
                log.debug("HA peer %s closed before sending a hello (port probe?)", peer)
                writer.close()
            elif exc.field == "proof":
                self.counters.refused += 1
                self._refusal_log.warning("HA peer %s left without answering the challenge (a slave without "
                                          "haAuthSecret?)", peer)
                writer.close()
            else:
                self._refuse(writer, peer, exc.message)
        except (ConnectionError, OSError) as exc:
            log.debug("HA peer %s went away during the handshake: %r", peer, exc)
            writer.close()
        return None

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mine: Place) -> None:
        peer = _peer(writer)
        if not self._listening:
            writer.close()
            return
        hello = await self._authenticate(reader, writer, peer, mine)
        if hello is None or not self._listening:
            writer.close()
            return
        bid = hello.broker_id
        authenticated = bool(self.secret)
        if authenticated:
            self.slots.learn(mine.host)  # it proved the secret: its address keeps handshake slots of its own
        old = self.connections.get(bid)
        if old is not None and not old.closed and old.peer_gone:
            old.close(CloseReason.PEER_CLOSED)  # its slave closed it and is this reconnect: no second claimant
        live = old is not None and not old.closed
        silent_s = time.monotonic() - old.link.last_read_mono if live else 0.0
        decision = admit(authenticated=authenticated, live_with_same_id=live, old_silent_s=silent_s,
                         idle_s=self.policy.idle_s)
        if decision is Admission.DUPLICATE:
            self.counters.refused += 1
            self.counters.duplicate_claims[bid] = self.counters.duplicate_claims.get(bid, 0) + 1
            self._duplicate_log.log(
                logging.ERROR, "HA: two live peers claim slave brokerId %d of %s/%s: %s holds it (read %.1f s ago) "
                "and %s proved the cluster's HA secret too; the newcomer is refused and the live link kept (a live "
                "link is replaced only after haHousekeepingInterval, %.0f s, without a read). Two slaves share "
                "brokerId %d (give each its own), or the HA secret leaked (rotate it)", bid, self.cluster,
                self.broker_name, old.link.slave_addr, silent_s, peer, self.policy.idle_s, bid)
            self._close_refused(writer)
            return
        if decision is Admission.REFUSE:
            self._refuse(writer, peer, f"brokerId {bid} is already connected from {old.link.slave_addr} and this "
                                       "master authenticates nobody (no haAuthSecret): the newcomer waits until "
                                       "that connection closes or expires (haHousekeepingInterval)")
            return
        if bid not in self.connections and len(self.connections) >= MAX_CONNECTIONS:
            self._refuse(writer, peer, f"this master already serves {MAX_CONNECTIONS} slaves")
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if decision is Admission.REPLACE:
            self.counters.replaced += 1
            log.warning("HA slave brokerId %d connected from %s; closing its older connection from %s, which read "
                        "nothing for %.1f s (haHousekeepingInterval %.0f s: dead)", bid, peer, old.link.slave_addr,
                        silent_s, self.policy.idle_s)
            old.close(CloseReason.REPLACED)
        link = SlaveLink(slave_addr=peer, broker_id=bid, broker_addr=hello.broker_addr,
                         connected_at_ms=int(time.time() * 1000), authenticated=authenticated)
        conn = MasterConnection(self, self.store, self.policy, reader, writer, link)
        self.connections[bid] = conn
        self.links[bid] = link
        if len(self.links) > MAX_LINKS_KEPT:
            closed = [b for b, lk in self.links.items() if lk.state is ConnState.CLOSED]
            for gone in closed[: len(self.links) - MAX_LINKS_KEPT]:
                del self.links[gone]
        self.counters.accepted += 1
        log.info("HA slave %s/%s brokerId %d (broker %s) connected from %s (%s)", hello.cluster, hello.broker_name,
                 bid, hello.broker_addr or "address not sent", peer,
                 "authenticated" if authenticated else "NOT authenticated")
        conn.start()


def _peer(writer: asyncio.StreamWriter) -> str:
    peername = writer.get_extra_info("peername")
    return f"{peername[0]}:{peername[1]}" if peername else "?"
