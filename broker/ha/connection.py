"""One slave connection on the master: a report reader task and a frame writer task (RocketMQ HAConnection).

Reader: reads chunks, keeps only the newest complete 8-byte report (``ReportDecoder``). The first report is the
start request; later ones are acks judged by ``state.judge_report`` (beyond the master's max or beyond what was
sent -> close, RocketMQ #3015; decreasing -> close). Accepted acks go to the owner's ``on_ack``.

Writer: picks the start (``state.choose_start``; an out-of-range slave gets an error frame, a clear log line and
the close), then streams frames of at most ``haTransferBatchSize`` body bytes, each from ONE commitlog file
(``store.commitlog_slice`` never crosses a file end). Two paths:
- hot path (lag < ``sendfile_min_lag``, 16 MiB by default): everything pending, up to ``COALESCE_BYTES``, joined
  into one ``transport.write`` (one copy, no thread hop; a SYNC_MASTER's in-flight batches stay on this path);
- catch-up (lag >= ``sendfile_min_lag``): up to SENDFILE_BATCH_BYTES of frames per hop to a worker thread that
  writes each 12-byte header and ``os.sendfile``s the body from the segment fd at its file position (no Python
  copy, GIL released, one hop per ~64 frames; the thread's side is ``frame_streamer.stream_frames``). The thread
  works on ``dup``ed socket and file descriptors it owns, so a file deleted by cleanup or a connection closed
  meanwhile can never make it write the wrong bytes; it runs only while the transport's buffer is empty and the
  writer task (the only writer) awaits it. When the buffer is not empty, one frame goes through ``loop.sendfile``
  instead (it waits for the buffer to drain).
When caught up it waits on ``wake`` (set by the store's append listener), never polls. A heartbeat frame goes out
after ``haSendHeartbeatInterval`` without writes; the writer also expires the connection after
``haHousekeepingInterval`` without reads, also while it waits for a full socket to drain (a frozen slave reads
nothing and must not hold its link, and with it its brokerId, for ever).

Whichever task ends first closes the connection through a done-callback with a ``CloseReason``; error frames
are written only by the writer task or before the tasks start, so they never interleave with a half-sent
frame. Task-safety: event loop only.

What a connection knows of the master that runs it is ``ConnectionOwner`` (acks, the close, the counters) and
the ``TransferPolicy`` it reads; it never imports ``master.py``. When sendfile fails on its socket it falls
back to memory copies for itself only: one odd socket does not change how the master serves the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from broker.config import CatchUpFrom, MessageStoreConfig
from broker.ha.frame_streamer import FdFile, stream_frames
from broker.ha.state import (
    CloseReason,
    ConnState,
    HACounters,
    SlaveLink,
    Verdict,
    choose_start,
    judge_report,
    task_end,
)
from remoting.ha_codec import ErrorCode, ReportDecoder, encode_error, encode_header

log = logging.getLogger(__name__)

# Hot path: frames joined per transport.write. It must exceed what the producers append between two turns of the
# writer task: with 256 KiB, 8 busy ASYNC writers appended ~800 KiB per loop turn, the writer fell behind until the
# lag reached the sendfile threshold (ASYNC lag p50 ~0.6 s in bench.replication_bench). 4 MiB sends everything
# pending in one write (one syscall, one wakeup of the slave) in practice.
COALESCE_BYTES = 4 * 1024 * 1024
SENDFILE_BATCH_BYTES = 2 * 1024 * 1024  # catch-up: frames streamed per worker-thread hop
READ_CHUNK = 64 * 1024
STALL_WAIT_S = 0.05
CATCH_UP_LAG_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class TransferPolicy:
    """How a master streams to its slaves. The master owns it; connections read it and never change it."""

    batch_bytes: int  # haTransferBatchSize: body bytes per frame at most
    heartbeat_s: float  # haSendHeartbeatInterval
    idle_s: float  # haHousekeepingInterval
    file_size: int  # mappedFileSizeCommitLog (choose_start's LAST_FILE)
    catch_up_from: CatchUpFrom
    # Below this lag frames go through the transport (one copy, no thread hop); at or above it the slave is
    # catching up and a worker thread sendfiles batches. Waking a thread for a small lag costs more than the
    # copy: the GIL hand-off delays the event loop by milliseconds (measured: SYNC puts 3x slower).
    sendfile_min_lag: int
    use_sendfile: bool = True
    use_sendfile_thread: bool = True  # False: catch-up frames go one by one through loop.sendfile

    @classmethod
    def from_config(cls, cfg: MessageStoreConfig) -> TransferPolicy:
        return cls(batch_bytes=cfg.ha_transfer_batch_size, heartbeat_s=cfg.ha_send_heartbeat_interval / 1000.0,
                   idle_s=cfg.ha_housekeeping_interval / 1000.0, file_size=cfg.mapped_file_size_commit_log,
                   catch_up_from=cfg.ha_slave_catch_up_from,
                   sendfile_min_lag=max(CATCH_UP_LAG_BYTES, 4 * cfg.ha_transfer_batch_size))


class ConnectionOwner(Protocol):
    """What a connection tells the master that runs it (``HAMaster``)."""

    counters: HACounters

    def on_ack(self, offset: int) -> None:
        """A slave acked ``offset`` (its first report counts once it is known to lie in the master's range)."""

    def on_connection_closed(self, conn: MasterConnection) -> None:
        """``conn`` closed (called once, from ``close``)."""


class MasterConnection:
    def __init__(self, owner: ConnectionOwner, store, policy: TransferPolicy, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, link: SlaveLink) -> None:
        self.owner = owner
        self.store = store
        self.policy = policy
        self.counters = owner.counters
        self.use_sendfile = policy.use_sendfile  # this connection's own: a failing sendfile turns it off here only
        self.reader = reader
        self.writer = writer
        self.link = link
        self.wake = asyncio.Event()
        self._first_report = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._closed = asyncio.Event()
        self._abort = threading.Event()  # tells a sendfile worker thread to stop
        self.batch = policy.batch_bytes
        self.heartbeat_s = policy.heartbeat_s
        self.idle_s = policy.idle_s

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def peer_gone(self) -> bool:
        """The slave closed its end (EOF read, or the transport is closing) though the reader task has not ended
        the connection yet: a reconnect that races its own close must not count as a second claimant."""
        return self.reader.at_eof() or self.writer.is_closing()

    def start(self) -> None:
        now = time.monotonic()
        self.link.last_read_mono = now
        self.link.last_write_mono = now
        name = f"ha-slave-{self.link.broker_id}@{self.link.slave_addr}"
        for role, coro in (("reader", self._read_loop()), ("writer", self._write_loop())):
            task = asyncio.get_running_loop().create_task(coro, name=f"{name}.{role}")
            task.add_done_callback(self._on_task_done)
            self._tasks.append(task)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # lifecycle -------------------------------------------------------------------------------------------
    def _on_task_done(self, task: asyncio.Task) -> None:
        reason, exc = task_end(task)
        if reason is CloseReason.PROTOCOL_ERROR:
            log.warning("HA slave %s sent an invalid report: %s; closing", self.link.slave_addr, exc)
        elif exc is not None and not isinstance(exc, (ConnectionError, OSError)):
            log.error("HA connection task %s died: %r", task.get_name(), exc, exc_info=exc)
        self.close(reason, detail=repr(exc) if reason is CloseReason.IO_ERROR else "")

    def close(self, reason: CloseReason, detail: str = "") -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._abort.set()
        self.link.state = ConnState.CLOSED
        self.link.close_reason = reason.value + (f": {detail}" if detail else "")
        for task in self._tasks:
            if not task.done():
                task.cancel()
        with contextlib.suppress(Exception):
            self.writer.close()
        log.info("HA connection to slave %s (brokerId %d) closed: %s; acked %d, sent %d bytes",
                 self.link.slave_addr, self.link.broker_id, self.link.close_reason, self.link.ack_offset,
                 self.link.transferred_bytes)
        self.owner.on_connection_closed(self)

    def send_error_and_close(self, code: ErrorCode, message: str, reason: CloseReason, *, phy_offset: int = -1) -> None:
        store = self.store
        # Offsets only to a slave that proved the secret (in unsafe mode nobody did: it gets -1, like a refused peer).
        known = self.link.authenticated
        with contextlib.suppress(Exception):
            self.writer.write(encode_error(code, message, phy_offset=phy_offset if known else -1,
                                           master_min=store.min_phy_offset if known else -1,
                                           master_max=store.max_phy_offset if known else -1))
        self.counters.error_frames_sent += 1
        self.close(reason, detail=message)

    # reader ----------------------------------------------------------------------------------------------
    async def _read_loop(self) -> CloseReason:
        decoder = ReportDecoder()
        link = self.link
        owner = self.owner
        store = self.store
        while True:
            data = await self.reader.read(READ_CHUNK)
            if not data:
                return CloseReason.PEER_CLOSED
            link.last_read_mono = time.monotonic()
            link.last_read_ms = int(time.time() * 1000)
            value = decoder.feed(data)
            if value is None:
                continue
            if link.request_offset < 0:
                link.request_offset = value
                link.ack_offset = value
                self._first_report.set()
                continue
            if link.state is not ConnState.TRANSFER:
                # Reports before the start point is chosen only repeat the request.
                if value != link.request_offset:
                    log.warning("HA slave %s changed its request %d -> %d before streaming started; closing",
                                link.slave_addr, link.request_offset, value)
                    return CloseReason.PROTOCOL_ERROR
                continue
            verdict = judge_report(value, last_ack=link.ack_offset, sent_upto=link.next_transfer,
                                   master_max=store.max_phy_offset)
            if verdict is Verdict.ACK:
                link.ack_offset = value
                link.last_ack_ms = link.last_read_ms
                owner.on_ack(value)
            elif verdict is Verdict.SAME:
                continue
            elif verdict is Verdict.BEYOND_MAX:
                log.warning("HA slave %s (brokerId %d) acked offset %d beyond the master's max offset %d; closing "
                            "the connection (RocketMQ #3015: a real slave cannot have bytes the master never wrote)",
                            link.slave_addr, link.broker_id, value, store.max_phy_offset)
                return CloseReason.ACK_BEYOND_MAX
            elif verdict is Verdict.BEYOND_SENT:
                log.warning("HA slave %s acked offset %d but this connection only sent up to %d; closing",
                            link.slave_addr, value, link.next_transfer)
                return CloseReason.PROTOCOL_ERROR
            else:
                log.warning("HA slave %s acked %d after acking %d: acks must not decrease; closing",
                            link.slave_addr, value, link.ack_offset)
                return CloseReason.PROTOCOL_ERROR

    # writer ----------------------------------------------------------------------------------------------
    async def _write_loop(self) -> CloseReason | None:
        link = self.link
        store = self.store
        policy = self.policy
        try:
            async with asyncio.timeout(self.idle_s):
                await self._first_report.wait()
        except TimeoutError:
            log.warning("HA slave %s passed the handshake but sent no offset report within %.0f s; closing",
                        link.slave_addr, self.idle_s)
            return CloseReason.READ_IDLE
        decision = choose_start(link.request_offset, master_min=store.min_phy_offset,
                                master_max=store.max_phy_offset, file_size=policy.file_size,
                                catch_up_from=policy.catch_up_from)
        if decision.error is not None:
            log.error("HA slave %s (brokerId %d) refused: %s", link.slave_addr, link.broker_id, decision.error.message)
            self.send_error_and_close(decision.error.code, decision.error.message, CloseReason.CATCH_UP_ERROR,
                                      phy_offset=link.request_offset)
            return None
        link.transfer_from = link.next_transfer = decision.start
        link.state = ConnState.TRANSFER
        self.owner.on_ack(link.request_offset)  # the first report counts as an ack now it is known to be in range
        log.info("HA slave %s (brokerId %d) streaming from %d (%s); master min %d max %d", link.slave_addr,
                 link.broker_id, decision.start, decision.reason, store.min_phy_offset, store.max_phy_offset)
        transport = self.writer.transport
        loop = asyncio.get_running_loop()
        while True:
            now = time.monotonic()
            if now - link.last_read_mono > self.idle_s:
                log.warning("HA slave %s: nothing read for %.1f s (haHousekeepingInterval); closing",
                            link.slave_addr, now - link.last_read_mono)
                return CloseReason.READ_IDLE
            if link.next_transfer < store.min_phy_offset:
                msg = (f"the master deleted commitlog files below {store.min_phy_offset} before offset "
                       f"{link.next_transfer} was sent; wipe the slave store so it copies from the master's min offset")
                log.error("HA slave %s: %s", link.slave_addr, msg)
                self.send_error_and_close(ErrorCode.SLAVE_BEHIND_MASTER_MIN, msg, CloseReason.CATCH_UP_ERROR,
                                          phy_offset=link.next_transfer)
                return None
            lag = store.max_phy_offset - link.next_transfer
            if lag <= 0:
                await self._idle_wait(now)
                continue
            if lag >= policy.sendfile_min_lag and self.use_sendfile:
                if transport.get_write_buffer_size() == 0 and policy.use_sendfile_thread:
                    sent = await self._send_sendfile_batch(loop)
                else:
                    sent = await self._send_sendfile_frame(loop, transport)
            else:
                sent = self._send_memory_frames()
                if sent and not await self._drain():
                    return CloseReason.READ_IDLE
            if not sent:
                # Counted but not readable at this offset yet (e.g. a file being rolled): wait for the next append,
                # at most STALL_WAIT_S, rather than spin.
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STALL_WAIT_S):
                        await self.wake.wait()

    async def _idle_wait(self, now: float) -> None:
        link = self.link
        self.wake.clear()
        if self.store.max_phy_offset > link.next_transfer:
            return
        wait_s = min(self.heartbeat_s - (now - link.last_write_mono), self.idle_s - (now - link.last_read_mono))
        if wait_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self.wake.wait()
                    return
        if time.monotonic() - link.last_write_mono >= self.heartbeat_s:
            self.writer.write(encode_header(link.next_transfer, 0))
            link.last_write_mono = time.monotonic()
            self.counters.heartbeats_sent += 1
            if not await self._drain():
                raise ConnectionError(f"HA slave {link.slave_addr} read nothing for {self.idle_s:.1f} s "
                                      "(haHousekeepingInterval) while its socket stayed full")

    async def _drain(self) -> bool:
        """``writer.drain()``, bounded: False (log line included) once nothing was read from the slave for
        haHousekeepingInterval while waiting."""
        link = self.link
        while True:
            remaining = self.idle_s - (time.monotonic() - link.last_read_mono)
            if remaining <= 0:
                log.warning("HA slave %s: nothing read for %.1f s (haHousekeepingInterval) while its socket stayed "
                            "full; closing", link.slave_addr, time.monotonic() - link.last_read_mono)
                return False
            try:
                async with asyncio.timeout(remaining):
                    await self.writer.drain()
                return True
            except TimeoutError:
                continue

    def _send_memory_frames(self) -> int:
        """Join up to COALESCE_BYTES of frames into one write; returns body bytes queued."""
        store = self.store
        link = self.link
        parts: list = []
        total = 0
        frames = 0
        nxt = link.next_transfer
        while total < COALESCE_BYTES:
            sl = store.commitlog_slice(nxt, self.batch)
            if sl is None or sl.length <= 0:
                break
            assert sl.phy_offset == nxt, f"commitlog_slice({nxt}) returned offset {sl.phy_offset}"
            parts.append(encode_header(nxt, sl.length))
            parts.append(sl.view[: sl.length])
            nxt += sl.length
            total += sl.length
            frames += 1
        if not total:
            return 0
        self.writer.write(b"".join(parts))
        parts.clear()
        link.next_transfer = nxt
        link.transferred_bytes += total
        link.frames += frames
        link.last_write_mono = time.monotonic()
        counters = self.counters
        counters.bytes_sent += total
        counters.frames_sent += frames
        return total

    async def _send_sendfile_batch(self, loop: asyncio.AbstractEventLoop) -> int:
        store = self.store
        link = self.link
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            self.use_sendfile = False
            return 0
        frames: list[tuple[bytes, int, int, int]] = []
        dups: dict[int, int] = {}
        nxt = link.next_transfer
        total = 0
        try:
            while total < SENDFILE_BATCH_BYTES:
                sl = store.commitlog_slice(nxt, self.batch)
                if sl is None or sl.length <= 0:
                    break
                assert sl.phy_offset == nxt, f"commitlog_slice({nxt}) returned offset {sl.phy_offset}"
                fd = dups.get(sl.fd)
                if fd is None:
                    fd = dups[sl.fd] = os.dup(sl.fd)
                frames.append((encode_header(nxt, sl.length), fd, sl.file_position, sl.length))
                nxt += sl.length
                total += sl.length
            if not frames:
                return 0
            sock_fd = os.dup(sock.fileno())
        except BaseException:
            for fd in dups.values():
                os.close(fd)
            raise
        # Acks may arrive while the thread streams: count the batch as sent before it starts (a failure closes
        # the connection anyway). From here the worker thread owns sock_fd and the file dups and closes them.
        link.next_transfer = nxt
        sent = await loop.run_in_executor(None, stream_frames, sock_fd, frames, list(dups.values()), self._abort,
                                          self.idle_s)
        link.transferred_bytes += sent
        link.frames += len(frames)
        link.sendfile_frames += len(frames)
        link.last_write_mono = time.monotonic()
        counters = self.counters
        counters.bytes_sent += sent
        counters.frames_sent += len(frames)
        counters.sendfile_frames += len(frames)
        return sent

    async def _send_sendfile_frame(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport) -> int:
        store = self.store
        link = self.link
        sl = store.commitlog_slice(link.next_transfer, self.batch)
        if sl is None or sl.length <= 0:
            return 0
        assert sl.phy_offset == link.next_transfer, f"commitlog_slice({link.next_transfer}) returned {sl.phy_offset}"
        self.writer.write(encode_header(sl.phy_offset, sl.length))
        link.next_transfer += sl.length  # acks may arrive before sendfile returns
        try:
            try:
                async with asyncio.timeout(self.idle_s):
                    sent = await loop.sendfile(transport, FdFile(sl.fd), sl.file_position, sl.length, fallback=False)
            except TimeoutError:
                raise ConnectionError(f"HA slave {link.slave_addr} took no frame bytes for {self.idle_s:.1f} s "
                                      "(haHousekeepingInterval)") from None
            link.sendfile_frames += 1
            self.counters.sendfile_frames += 1
        except (asyncio.SendfileNotAvailableError, RuntimeError) as exc:
            if transport.is_closing():
                raise ConnectionError("HA transport closed during sendfile") from exc
            self.use_sendfile = False
            log.warning("sendfile unavailable on the HA socket to slave %s (%s); copying through memory on this "
                        "connection from now on", link.slave_addr, exc)
            self.writer.write(sl.view[: sl.length])
            sent = sl.length
        if sent != sl.length:
            raise ConnectionError(f"sendfile sent {sent} of {sl.length} bytes at offset {sl.phy_offset}")
        link.transferred_bytes += sl.length
        link.frames += 1
        link.last_write_mono = time.monotonic()
        self.counters.bytes_sent += sl.length
        self.counters.frames_sent += 1
        return sl.length
