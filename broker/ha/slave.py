"""The slave's HA client: connect to the master's HA port, report, append what it streams (RocketMQ HAClient).

The master's HA address is ``haMasterAddress`` when set, else whatever the broker passes to
``update_master_address`` after each nameserver registration (a change closes the current connection and
reconnects to the new address). Per connection:
- connect with a 5 s timeout (a stop cuts a pending connect short); send the hello (a fresh nonce, and this
  broker's address so the master's ``haStatus`` can name it); the master answers a challenge. With a secret the
  slave checks the master's proof first (an impostor posing as the master gets nothing: no proof, no report), then
  sends its own proof and the first report (the local max offset) at once (RocketMQ waited ~5 s before the first
  report). A master that authenticates while this slave has no secret, or the reverse, is a configuration error:
  logged at ERROR with what to set, retried every MAX_BACKOFF_S;
- receive side: an ``asyncio.BufferedProtocol`` (``receive_buffer.ReceiveBuffer``) lets the kernel write straight
  into an 8 MiB buffer; the reader task parses every complete frame in place (``parse_frames``, zero-copy), checks
  each header's offset against the local max (an empty store accepts any offset: it starts at the master's
  choice), appends the body view with ``store.append_replicated`` (one pwrite, no Python copy), then writes ONE
  report for the whole batch (coalesced acks), at once; reading pauses while the buffer lacks room for a whole
  frame;
- writer task: the hello, then (once the reader answered the challenge) a report every
  ``haSendHeartbeatInterval`` (or when the local max grew without an ack); expires the connection after
  ``haHousekeepingInterval`` without reads (RocketMQ 5.x's last-read rule). Both tasks write whole 8-byte
  reports with non-blocking ``transport.write`` calls, so their writes never interleave inside a report.
A header offset that differs from the local max logs "master pushed offset X, slave max is Y" and reconnects
at once from the local max. An error frame is logged at ERROR with the offsets and what to do. Other failures
reconnect with bounded exponential backoff (0.1 s doubling to MAX_BACKOFF_S). Lines that repeat with every
retry (connect failures, refusals and error frames, closes of connections that never streamed, a task's
traceback) go through ``RateLimitedLog``: at most one per kind per LOG_EVERY_S, with the count left out.

Task-safety: event loop only; one connection at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import struct
import time
import ssl as ssl_module

from broker.config import MessageStoreConfig
from broker.ha.receive_buffer import ReceiveBuffer
from broker.ha.state import CloseReason, HACounters, proof_matches, task_end
from broker.store.types import StoreOffsetMismatch
from common.log import RateLimitedLog
from common.service import Service
from remoting.ha_codec import ErrorCode, ErrorFrame, ProtocolError, encode_report, parse_frames
from remoting.ha_handshake import NONCE_BYTES, Challenge, encode_hello, master_proof, slave_proof
from remoting.client import tls_args
from remoting.headers import parse_host_port

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 10.0  # hello sent -> challenge received (the master allows 3 s for the whole handshake)
MIN_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
BUFFER_BYTES = 8 * 1024 * 1024  # receive buffer per connection (frames are parsed and appended in place)
MAX_PENDING_WRITE_BYTES = 1024 * 1024  # reports queued because the master stopped reading: give up
LOG_EVERY_S = 10.0  # lines that repeat with every reconnect attempt: at most one per kind per interval

_ERROR_ADVICE = {
    ErrorCode.SLAVE_BEHIND_MASTER_MIN: "wipe the slave store (its commitlog and consumequeue directories) so it "
                                       "copies from the master's min offset, or set haSlaveCatchUpFrom=LAST_FILE "
                                       "on the master and wipe the slave to copy only the newest file",
    ErrorCode.SLAVE_AHEAD_OF_MASTER_MAX: "the slave holds bytes the master never wrote (an old master rejoined as "
                                         "slave?); wipe or truncate the slave store before it can replicate",
    ErrorCode.PEER_REFUSED: "check brokerClusterName, brokerName, brokerId (>= 1) and haAuthSecret on both sides, "
                            "and that haMasterAddress points at this group's master",
}


def parse_master_addr(addr: str) -> tuple[str, int]:
    return parse_host_port(addr.strip(), "HA master address")  # NumberError is a ValueError


class HASlave(Service):
    def __init__(self, *, store, store_config: MessageStoreConfig, cluster: str, broker_name: str, broker_id: int,
                 master_addr: str = "", secret: bytes = b"", counters: HACounters | None = None,
                 broker_addr: str = "", ssl: ssl_module.SSLContext | None = None) -> None:
        super().__init__(f"ha-slave[{broker_name}-{broker_id}]")
        self.ssl = ssl  # tls.enable: TLS to the master's HA port (remoting.tls.client_context)
        self.store = store
        self.cfg = store_config
        self.secret = secret
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.broker_addr = broker_addr  # brokerIP1:listenPort, sent in the hello ("" sends none)
        encode_hello(broker_id=broker_id, cluster=cluster, broker_name=broker_name, nonce=bytes(NONCE_BYTES),
                     broker_addr=broker_addr)  # a ValueError now, not at each connect
        self.master_addr = master_addr
        self.fixed_address = bool(master_addr)
        self.counters = counters or HACounters()
        self.connected = False
        self.last_read_ms = 0
        self.last_write_ms = 0
        self.replicated_bytes = 0
        self.last_error = ""
        self._addr_changed = asyncio.Event()
        self._conn: _SlaveConnection | None = None
        # One limiter per kind, kept across connections: each retry would log them again.
        self.connect_log = RateLimitedLog(log, LOG_EVERY_S)  # the master's HA port does not answer
        self.refusal_log = RateLimitedLog(log, LOG_EVERY_S)  # error frames, untrusted masters, handshake timeouts
        self.close_log = RateLimitedLog(log, LOG_EVERY_S)  # connections closed before anything streamed
        self.crash_log = RateLimitedLog(log, LOG_EVERY_S)  # a reader or writer task died (with its traceback)

    def silence_s(self, now_mono: float) -> float | None:
        """Seconds since the master last sent a byte on the live connection; None while not connected."""
        conn = self._conn
        if conn is None or not self.connected:
            return None
        return max(0.0, now_mono - conn.last_read_mono)

    # control ---------------------------------------------------------------------------------------------
    def update_master_address(self, addr: str) -> None:
        """Called after each registration with the reply's master HA address; empty keeps the old one."""
        if self.fixed_address or not addr or addr == self.master_addr:
            return
        log.info("%s: master HA address %s -> %s", self.name, self.master_addr or "(none)", addr)
        self.master_addr = addr
        self._addr_changed.set()
        if self._conn is not None:
            self._conn.close(CloseReason.ADDRESS_CHANGED)

    async def on_start(self) -> None:
        self.spawn("client", self._run())

    async def on_stop(self) -> None:
        self._addr_changed.set()
        if self._conn is not None:
            self._conn.close(CloseReason.SHUTDOWN)

    async def _connect(self, host: str, port: int) -> tuple[asyncio.Transport, ReceiveBuffer] | None:
        """The connection within CONNECT_TIMEOUT_S, or None as soon as the service stops. A controller-mode role
        switch stops this client while it may be connecting to a master whose address no longer answers at all (a
        killed container's: no refusal, the SYN goes nowhere); stop() must not wait out the connect timeout, which
        held the new master's switch, and so its route, for 5 s."""
        loop = asyncio.get_running_loop()
        connect = asyncio.ensure_future(asyncio.wait_for(loop.create_connection(
            lambda: ReceiveBuffer(BUFFER_BYTES, self.cfg.ha_transfer_batch_size), host, port,
            **tls_args(self.ssl, host, CONNECT_TIMEOUT_S)), CONNECT_TIMEOUT_S))
        stopped = asyncio.ensure_future(self.sleep(CONNECT_TIMEOUT_S + 1.0))
        try:
            await asyncio.wait({connect, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if connect.done() and not self.stopping:
            return connect.result()  # raises what the connect raised
        connect.cancel()
        try:
            transport, _ = await connect
        except (asyncio.CancelledError, OSError, TimeoutError):
            return None
        transport.close()  # connected just as the service stopped
        return None

    # main loop -------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = MIN_BACKOFF_S
        while not self.stopping:
            if not self.master_addr:
                self._addr_changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(MAX_BACKOFF_S):
                        await self._addr_changed.wait()
                continue
            addr = self.master_addr
            try:
                host, port = parse_master_addr(addr)
                connected = await self._connect(host, port)
            except (OSError, TimeoutError, ValueError) as exc:  # ssl.SSLError is an OSError
                self.last_error = f"connect to {addr} failed: {exc!r}"
                self.connect_log.warning("%s: cannot connect to master HA %s: %r; retrying in %.1f s (is "
                                         "haListenPort/brokerIP2 right?)", self.name, addr, exc, backoff)
                self.counters.reconnects += 1
                if await self.sleep(backoff):
                    return
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            if connected is None:  # stopping
                return
            transport, proto = connected
            self.counters.connects += 1
            conn = _SlaveConnection(self, transport, proto, addr)
            self._conn = conn
            self.connected = True
            try:
                reason = await conn.run()
            finally:
                self.connected = False
                self._conn = None
            if self.stopping:
                return
            self.counters.reconnects += 1
            if conn.appended_frames:
                backoff = MIN_BACKOFF_S  # it worked for a while: retry quickly
            if reason is CloseReason.ADDRESS_CHANGED or (reason is CloseReason.OFFSET_MISMATCH and conn.appended_frames):
                continue  # reconnect at once from the local max
            # a mismatch right after connecting (nothing appended) backs off like any failure: no hot loop
            delay = MAX_BACKOFF_S if reason in (CloseReason.CATCH_UP_ERROR, CloseReason.REFUSED) else backoff
            if await self.sleep(delay):
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)


class _SlaveConnection:
    def __init__(self, owner: HASlave, transport: asyncio.Transport, proto: ReceiveBuffer, addr: str) -> None:
        self.owner = owner
        self.transport = transport
        self.proto = proto
        self.addr = addr
        self.appended_frames = 0
        self.reported = -1
        self.last_read_mono = time.monotonic()
        self.last_write_mono = time.monotonic()
        self._done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._tasks: list[asyncio.Task] = []
        self.hello = encode_hello(broker_id=owner.broker_id, cluster=owner.cluster, broker_name=owner.broker_name,
                                  nonce=os.urandom(NONCE_BYTES), broker_addr=owner.broker_addr)
        self.challenged = asyncio.Event()  # set once the challenge was answered: reports may flow

    @property
    def received_bytes(self) -> int:
        return self.proto.received

    async def run(self) -> CloseReason:
        owner = self.owner
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            import socket as _socket

            with contextlib.suppress(OSError):
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        for role, coro in (("reader", self._read_loop()), ("writer", self._write_loop())):
            task = asyncio.get_running_loop().create_task(coro, name=f"{owner.name}.{role}")
            task.add_done_callback(self._on_task_done)
            self._tasks.append(task)
        try:
            return await asyncio.shield(self._done)
        except asyncio.CancelledError:
            self.close(CloseReason.SHUTDOWN)
            raise

    def _on_task_done(self, task: asyncio.Task) -> None:
        reason, exc = task_end(task)
        owner = self.owner
        if reason is CloseReason.PROTOCOL_ERROR:
            owner.refusal_log.warning("%s: invalid frame from master %s: %s", owner.name, self.addr, exc)
        elif isinstance(exc, (ConnectionError, OSError)):
            owner.close_log.log(logging.INFO, "%s: HA connection to %s broke: %r", owner.name, self.addr, exc)
        elif exc is not None:
            owner.crash_log.log(logging.ERROR, "%s: HA task %s died: %r", owner.name, task.get_name(), exc,
                                exc_info=exc)
        self.close(reason)

    def close(self, reason: CloseReason) -> None:
        if self._done.done():
            return
        for task in self._tasks:
            if not task.done():
                task.cancel()
        with contextlib.suppress(Exception):
            if reason is CloseReason.SHUTDOWN:
                # the broker stops streaming (a controller-mode slave about to become master): reset, so that acks
                # still unacknowledged in the kernel are dropped, never delivered late to the old master after a
                # partition heals (they could release a SEND_OK there after this broker's first one: fence.py)
                sock = self.transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.transport.abort()
            else:
                self.transport.close()
        if reason not in (CloseReason.SHUTDOWN,):
            # A connection that streamed is news; one refused or closed during the handshake repeats with every retry.
            line = log if self.challenged.is_set() else self.owner.close_log
            line.log(logging.INFO, "%s: HA connection to %s closed: %s (local max %d)", self.owner.name, self.addr,
                     reason.value, self.owner.store.max_phy_offset)
        self._done.set_result(reason)

    def _write(self, data: bytes) -> None:
        if self.transport.get_write_buffer_size() > MAX_PENDING_WRITE_BYTES:
            raise ConnectionError(f"master {self.addr} stopped reading reports ({MAX_PENDING_WRITE_BYTES} bytes queued)")
        self.transport.write(data)

    # reader ----------------------------------------------------------------------------------------------
    async def _read_loop(self) -> CloseReason:
        owner = self.owner
        store = owner.store
        counters = owner.counters
        proto = self.proto
        max_body = owner.cfg.ha_transfer_batch_size
        seen = 0
        while True:
            await proto.ready.wait()
            proto.ready.clear()
            if proto.received != seen:
                counters.bytes_received += proto.received - seen
                seen = proto.received
                self.last_read_mono = time.monotonic()
                owner.last_read_ms = int(time.time() * 1000)
            frames, pos = parse_frames(proto.view, proto.start, proto.end, max_body)
            grew = False
            try:
                for frame in frames:
                    if isinstance(frame, ErrorFrame):
                        return self._on_error_frame(frame)
                    if isinstance(frame, Challenge):
                        refused = self._on_challenge(frame)
                        if refused is not None:
                            return refused
                        continue
                    if not self.challenged.is_set():
                        raise ProtocolError("the master sent a frame before its challenge", field="challenge")
                    local_max = store.max_phy_offset
                    if local_max != 0 and frame.phy_offset != local_max:
                        counters.offset_mismatches += 1
                        log.warning("%s: master pushed offset %d, slave max is %d; reconnecting from the slave max",
                                    owner.name, frame.phy_offset, local_max)
                        return CloseReason.OFFSET_MISMATCH
                    if not frame.body:
                        continue
                    try:
                        result = store.append_replicated(frame.phy_offset, frame.body)
                        if inspect.isawaitable(result):
                            await result
                    except StoreOffsetMismatch as exc:
                        counters.offset_mismatches += 1
                        log.warning("%s: master pushed offset %d, slave max is %d (%s); reconnecting", owner.name,
                                    frame.phy_offset, exc.expected, exc)
                        return CloseReason.OFFSET_MISMATCH
                    except ValueError as exc:  # the store refuses the chunk (e.g. it would cross a file end)
                        log.error("%s: cannot append %d replicated bytes at %d: %s; master and slave must use the "
                                  "same mappedFileSizeCommitLog and haTransferBatchSize", owner.name,
                                  len(frame.body), frame.phy_offset, exc)
                        return CloseReason.PROTOCOL_ERROR
                    counters.frames_received += 1
                    owner.replicated_bytes += len(frame.body)
                    self.appended_frames += 1
                    grew = True
            finally:
                frames.clear()  # drop the body views before the buffer is compacted
            proto.consumed(pos)
            if grew:
                # One report per read batch, written here and now: waking the writer task would queue the ack
                # behind the dispatcher this append just woke, delaying SYNC_MASTER puts by a dispatch pass.
                self.report_now()
            if proto.eof:  # every complete frame was handled above; what is left is a truncated frame, if any
                return CloseReason.PEER_CLOSED if proto.lost is None else CloseReason.IO_ERROR

    def _on_challenge(self, challenge: Challenge) -> CloseReason | None:
        """Check the master's proof and answer with ours and the first report; a CloseReason when we must not."""
        owner = self.owner
        if self.challenged.is_set():
            raise ProtocolError("the master sent a second challenge", field="challenge")
        secret = owner.secret
        problem = ""
        if challenge.auth and not secret:
            problem = ("it authenticates its slaves and this slave has no HA secret: set the cluster's "
                       "haAuthSecretFile (or haAuthSecret) on this slave, the same as the master's")
        elif not challenge.auth and secret:
            problem = ("it authenticates nobody (no HA secret) and this slave does not replicate from a master that "
                       "cannot prove the cluster's secret: set the same haAuthSecretFile (or haAuthSecret) on it")
        elif secret and not proof_matches(master_proof(secret, self.hello, challenge.nonce), challenge.proof):
            problem = ("its proof does not match this slave's HA secret: the secrets differ, or the address is not "
                       "this group's master; check haAuthSecretFile on both and haMasterAddress")
        if problem:
            owner.last_error = f"master {self.addr} not trusted: {problem}"
            owner.refusal_log.log(logging.ERROR, "%s: not replicating from master %s: %s", owner.name, self.addr,
                                  problem)
            return CloseReason.REFUSED
        self.reported = owner.store.max_phy_offset
        proof = slave_proof(secret, self.hello, challenge.nonce) if challenge.auth else b""
        self._write(proof + encode_report(self.reported))
        self.last_write_mono = time.monotonic()
        self._wrote()
        self.challenged.set()
        return None

    def _on_error_frame(self, frame: ErrorFrame) -> CloseReason:
        owner = self.owner
        owner.counters.error_frames_received += 1
        advice = _ERROR_ADVICE.get(frame.code, "see the master's log")
        owner.last_error = f"{frame.code.name}: {frame.message}"
        master_range = (f", master min {frame.master_min}, max {frame.master_max}" if frame.master_max >= 0 else "")
        owner.refusal_log.log(logging.ERROR, "%s: master %s refused replication (%s): %s. Slave max offset %d%s. What "
                              "to do: %s", owner.name, self.addr, frame.code.name, frame.message,
                              owner.store.max_phy_offset, master_range, advice)
        if frame.code is ErrorCode.PEER_REFUSED:
            return CloseReason.REFUSED
        return CloseReason.CATCH_UP_ERROR

    # writer ----------------------------------------------------------------------------------------------
    async def _write_loop(self) -> CloseReason:
        owner = self.owner
        cfg = owner.cfg
        store = owner.store
        heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
        idle_s = cfg.ha_housekeeping_interval / 1000.0
        self._write(self.hello)
        self.last_write_mono = time.monotonic()
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                await self.challenged.wait()
        except TimeoutError:
            owner.refusal_log.warning("%s: master %s sent no challenge within %.0f s after the hello (not a pyrmq "
                                      "master of this version?); reconnecting", owner.name, self.addr,
                                      HANDSHAKE_TIMEOUT_S)
            return CloseReason.HANDSHAKE_TIMEOUT
        while True:
            now = time.monotonic()
            wait_s = min(heartbeat_s - (now - self.last_write_mono), idle_s - (now - self.last_read_mono))
            if wait_s > 0:
                await asyncio.sleep(wait_s)  # the period of heartbeats and idle checks (acks go out from the reader)
            now = time.monotonic()
            if now - self.last_read_mono > idle_s:
                log.warning("%s: nothing read from master %s for %.1f s (haHousekeepingInterval); reconnecting",
                            owner.name, self.addr, now - self.last_read_mono)
                return CloseReason.READ_IDLE
            if store.max_phy_offset != self.reported:
                self.report_now()
            elif now - self.last_write_mono >= heartbeat_s:
                self._write(encode_report(self.reported))
                self.last_write_mono = time.monotonic()
                self._wrote()

    def report_now(self) -> None:
        """Write the local max as a report (8 bytes, whole in the transport buffer; safe next to the writer task)."""
        current = self.owner.store.max_phy_offset
        if current != self.reported:
            self._write(encode_report(current))
            self.reported = current
            self.last_write_mono = time.monotonic()
            self._wrote()

    def _wrote(self) -> None:
        self.owner.last_write_ms = int(time.time() * 1000)
        self.owner.counters.reports_sent += 1
