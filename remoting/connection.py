"""One remoting connection, the same type at both ends (RocketMQ's channel plus NettyRemotingAbstract).

A connection carries requests both ways (a broker calls its clients with NOTIFY_CONSUMER_IDS_CHANGED):
responses are matched to waiting callers by ``opaque``; requests go to the ``dispatch`` function the owner gave
it. ``dispatch(conn, request)`` returns the response, ``None`` (nothing to answer) or an awaitable of either;
an awaitable runs as its own task, so a held pull or a send waiting for its slave never delays the requests
behind it, and answers are written in completion order. A future is answered from its done-callback, and a
``DeferredAnswer`` (a grouped single send) the moment it is resolved: neither costs a task per request. A oneway request (flag bit 1) is served and never
answered. A header that does not parse (``HeaderError``) or extFields that are not flat scalars answer 29
INVALID_PARAMETER without a log line; a processor that raises anything else answers 1 SYSTEM_ERROR and logs its
traceback, at most one per 10 s (a peer can repeat the request at will).

Every buffer is bounded (``Limits``):

- reading: the frame decoder holds at most one partial frame (``max_frame``); a frame that does not decode
  closes the connection with one log line (rate-limited per process), nothing else is touched;
- serving: at most ``max_requests`` requests of the peer, totalling ``max_request_bytes``, are served at once;
  beyond that the connection stops reading, and TCP holds the peer back. A request that waits for data rather
  than for work (a held long-polling pull: a consumer keeps one per queue it owns, thousands on one connection)
  says so with ``async with conn.parked()``: up to ``max_parked`` of them do not count toward ``max_requests``,
  so a consumer of 1,000 topics x 8 queues no longer stopped its own connection behind its held pulls (offset
  lookups and commits waited up to the 15 s hold and timed out);
- writing: when the peer does not read its answers and the transport's buffer passes ``write_high_water``, the
  connection stops reading new requests; when it stays stalled for ``stall_timeout_s`` or the buffer passes
  ``write_hard_cap``, the connection is closed with a log line saying why.

So one connection holds at most ``max_frame + max_request_bytes + write_hard_cap`` bytes (plus one answer).
Two more bounds keep a peer from holding that for long, or many peers from holding it at once:

- a frame must arrive whole within ``frame_timeout_s`` of its first byte (a byte does not restart the clock, so
  a peer trickling one byte every few seconds into a half-sent 8 MiB frame is closed; the idle timer alone never
  fires for it); while this connection stops reading (its own caps), the clock waits;
- a server's connections report what they hold to the process's ``remoting.held_bytes.HeldBytes``, which refuses
  frames over ``large_frame`` past its cap and closes the largest holders (see there).

Closing fails every waiting caller with ``RemotingClosedError`` and cancels the requests still being served (a
stored message stays stored; its answer has nowhere to go). Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import inspect
import logging
import struct
import termios
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from common.log import RateLimitedLog
from remoting.codes import ResponseCode
from remoting.errors import RemotingClosedError, RemotingTimeoutError, RemotingTooManyRequests
from remoting.frame_codec import (
    DEFAULT_MAX_FRAME,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    decode,
    encode,
    response_to,
)
from remoting.headers import HeaderError
from remoting.held_bytes import FRAME_TIMEOUT_KEY, HeldBytes

log = logging.getLogger(__name__)

Dispatch = Callable[["Connection", RemotingCommand], "RemotingCommand | None | Awaitable[RemotingCommand | None]"]


# Frames served in one go before the connection yields the loop to the others (about 64 small requests, well under
# a millisecond); the rest wait in its backlog, and it reads nothing new meanwhile.
FRAMES_PER_TURN = 64
TURN = "turn"  # the pause reason while a connection waits for its next turn


@dataclass(frozen=True)
class Limits:
    max_frame: int = DEFAULT_MAX_FRAME
    max_requests: int = 1024  # the peer's requests served at once
    max_parked: int = 16384  # of those, waiting for data (``parked``), not counted in max_requests
    max_request_bytes: int = 64 * 1024 * 1024  # their frames' bytes
    max_pending: int = 65536  # our requests waiting for the peer's answers
    write_high_water: int = 4 * 1024 * 1024
    write_hard_cap: int = 64 * 1024 * 1024
    stall_timeout_s: float = 30.0
    # a frame must be whole this long after its first byte: RocketMQ's clients give a send 3 s, so a frame still
    # arriving after 30 s is of no use to anyone, and a slow link still moves a 16 MiB frame in that time at 0.6 MB/s
    frame_timeout_s: float = 30.0
    # frames above this are refused while the process holds its cap of held bytes; below it every request passes
    # (route queries, heartbeats, small sends), so a normal client keeps working during an attack
    large_frame: int = 64 * 1024


DEFAULT_LIMITS = Limits()


bad_frame_log = RateLimitedLog(log)
# A request whose processor raised: a bug, but one a peer may trigger at will, so one traceback per interval.
failed_request_log = RateLimitedLog(log)
# Peers that do not read their answers or trickle their frames: one line per interval, an attack repeats them.
unread_answers_log = RateLimitedLog(log)
frame_timeout_log = RateLimitedLog(log)


class DeferredAnswer:
    """An answer a processor gives later with ``resolve(response)``: the connection writes it at once, in the same
    turn of the loop (a future would cost a turn of its own between ``set_result`` and the write). ``bind`` names
    who takes the answer (the connection, or ``await_answer``); a resolve before the bind waits for it. The
    connection cancels it when it closes: a later resolve is then dropped (``cancelled`` says so)."""

    __slots__ = ("_deliver", "_state", "_value")

    _PENDING, _HELD, _DONE, _CANCELLED = range(4)

    def __init__(self) -> None:
        self._deliver: Callable[[Any], None] | None = None
        self._state = self._PENDING
        self._value: Any = None

    def bind(self, deliver: Callable[[Any], None]) -> None:
        if self._state == self._HELD:
            self._state = self._DONE
            value, self._value = self._value, None
            deliver(value)
        elif self._state == self._PENDING:
            self._deliver = deliver

    def resolve(self, value: Any) -> None:
        if self._state != self._PENDING:
            return
        deliver = self._deliver
        if deliver is None:
            self._state, self._value = self._HELD, value
            return
        self._state, self._deliver = self._DONE, None
        deliver(value)

    def cancel(self) -> bool:
        self._state, self._deliver, self._value = self._CANCELLED, None, None
        return True

    @property
    def cancelled(self) -> bool:
        return self._state == self._CANCELLED


async def await_answer(answer: DeferredAnswer) -> Any:
    """The value of ``answer`` for a caller outside a connection (tests, benchmarks)."""
    fut = asyncio.get_running_loop().create_future()
    answer.bind(fut.set_result)
    return await fut


class Connection(asyncio.Protocol):
    def __init__(
        self,
        dispatch: Dispatch | None,
        limits: Limits = DEFAULT_LIMITS,
        *,
        on_lost: Callable[[Connection], None] | None = None,
        name: str = "remoting",
        held_bytes: HeldBytes | None = None,
        on_made: Callable[[Connection], None] | None = None,
    ) -> None:
        self.dispatch = dispatch
        self.limits = limits
        self.held_bytes = held_bytes  # the process's cap (server side); None: this connection is not counted
        self.held = 0  # bytes last reported to held_bytes
        self.on_lost = on_lost
        # called once the transport is up: a TLS connection whose handshake fails is created but never made (and
        # never lost), so an owner that lists its connections adds them here, not when it creates them
        self.on_made = on_made
        self.name = name
        self.peer = "?"
        self.local = "?"
        self.attrs: dict[str, Any] = {}  # owners keep per-connection facts here (client id, language, version)
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] | None = None
        self.last_read = time.monotonic()
        self._decoder = FrameDecoder(limits.max_frame)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaque = 0
        self._serving: set[asyncio.Task | asyncio.Future | DeferredAnswer] = set()
        self._serving_bytes = 0
        self._parked = 0  # requests in ``_serving`` that wait for data (``parked``)
        self._pause_reasons: set[str] = set()
        self._stall_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._close_reason = ""
        self._out: list[bytes | memoryview] = []  # frames queued for the next flush
        self._flush_scheduled = False
        self._out_bytes = 0
        self._backlog: deque[bytes] = deque()  # frames of one read left unserved when the serving cap was reached
        self._backlog_bytes = 0
        self._frame_started: float | None = None  # monotonic time of the buffered partial frame's first byte
        self._frame_admitted = False  # the partial frame's announced size was checked against the process's cap
        self._frame_timer: asyncio.TimerHandle | None = None
        self._fd = -1  # the socket's descriptor, for the kernel's count of unsent bytes

    # transport callbacks -----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's transports are not asyncio.Transport)
        self._loop = asyncio.get_running_loop()
        self.closed = self._loop.create_future()
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.local = f"{local[0]}:{local[1]}" if local else "?"
        transport.set_write_buffer_limits(high=self.limits.write_high_water)
        if self.held_bytes is not None:
            sock = transport.get_extra_info("socket")
            self._fd = sock.fileno() if sock is not None and _TIOCOUTQ is not None else -1
            self.held_bytes.add(self)
        if self.on_made is not None:
            self.on_made(self)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self._close_reason or (f"connection lost: {exc}" if exc else "connection closed by the peer")
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(RemotingClosedError(self.peer, reason))
        for task in list(self._serving):
            task.cancel()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None
        self._decoder = FrameDecoder(self.limits.max_frame)  # the partial frame's bytes go now, not with the object
        self._backlog.clear()
        self._backlog_bytes = 0
        if self.held_bytes is not None:
            self.held_bytes.remove(self)
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:
                log.exception("%s: connection-lost callback failed for %s", self.name, self.peer)

    def data_received(self, data: bytes) -> None:
        now = self.last_read = time.monotonic()
        decoder = self._decoder
        had_partial = decoder.buffered > 0
        try:
            frames = decoder.feed(data)
        except FrameError as exc:
            self._bad_frame(exc)
            return
        if decoder.buffered:
            if frames or not had_partial:  # a new frame began in this read: its clock starts now
                self._frame_started = now
                self._frame_admitted = False
                if self._frame_timer is None:
                    self._frame_timer = self._loop.call_later(self.limits.frame_timeout_s, self._frame_deadline)  # type: ignore[union-attr]
            if not self._frame_admitted and not self._admit(decoder.wanted):
                return
        else:
            self._frame_started = None
        self._serve_frames(frames)
        self.account()

    def _serve_frames(self, frames: list[bytes]) -> None:
        if self._backlog or self._pause_reasons:
            self._keep(frames)
            return
        for i, frame in enumerate(frames):
            if self._pause_reasons:  # a cap was reached inside this read: keep the rest for later
                self._keep(frames[i:])
                return
            if i == FRAMES_PER_TURN:  # one read of thousands of small requests: let other peers have the loop
                self._keep(frames[i:])
                self._yield_turn()
                return
            if not self._handle_frame(frame) or self.transport.is_closing():  # type: ignore[union-attr]
                return  # closed inside this read (a bad frame, the process's cap): serve nothing more

    def _yield_turn(self) -> None:
        """Stop reading and go on with the backlog after every callback already waiting on the loop: a peer that
        pipelines thousands of requests in one read takes turns with the others instead of holding the loop."""
        self._pause(TURN)
        self._loop.call_soon(self._resume, TURN)  # type: ignore[union-attr]

    def _keep(self, frames: list[bytes]) -> None:
        self._backlog.extend(frames)
        self._backlog_bytes += sum(map(len, frames))

    def _admit(self, wanted: int) -> bool:
        """Check the partial frame's announced size (once it is known) against the process's cap."""
        if not wanted:
            return True  # its length field is not complete yet
        self._frame_admitted = True
        budget = self.held_bytes
        if budget is None or wanted <= self.limits.large_frame:
            return True
        if budget.admits(self, self._held_now()):
            return True
        budget.refused(self, wanted)
        self._backlog.clear()
        self._backlog_bytes = 0
        self.abort("frame refused: the process holds its cap of bytes for its peers")
        return False

    def _frame_deadline(self) -> None:
        self._frame_timer = None
        started = self._frame_started
        if started is None or not self.is_open:
            return
        timeout = self.limits.frame_timeout_s
        if self._pause_reasons:  # we stopped reading: the peer cannot finish the frame, so its clock waits
            self._frame_started = started = time.monotonic()
        left = started + timeout - time.monotonic()
        if left > 0:
            self._frame_timer = self._loop.call_later(left, self._frame_deadline)  # type: ignore[union-attr]
            return
        frame_timeout_log.warning(
            "%s: closing the connection from %s: a frame was still incomplete %.0f s after its first byte "
            "(%d of %d bytes arrived); a peer that needs longer can have it with %s",
            self.name, self.peer, timeout, self._decoder.buffered, self._decoder.wanted, FRAME_TIMEOUT_KEY,
        )
        self._count_close("frame_timeout")
        self.abort("a frame did not arrive whole in time")

    def _handle_frame(self, frame: bytes) -> bool:
        try:
            cmd = decode(frame)
        except FrameError as exc:
            self._bad_frame(exc)
            return False
        if cmd.flag & FLAG_RESPONSE:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
        else:
            self._on_request(cmd, len(frame))
        return True

    def _drain_backlog(self) -> None:
        backlog = self._backlog
        served = 0
        while backlog and not self._pause_reasons and self.is_open:
            if served == FRAMES_PER_TURN:
                self._yield_turn()
                break
            frame = backlog.popleft()
            self._backlog_bytes -= len(frame)
            served += 1
            if not self._handle_frame(frame):
                return
        self.account()

    def _bad_frame(self, exc: FrameError) -> None:
        bad_frame_log.warning("%s: closing the connection from %s: %s", self.name, self.peer, exc)
        self._backlog.clear()
        self._backlog_bytes = 0
        self._count_close("malformed")
        self.abort(f"malformed frame: {exc}")

    def _count_close(self, reason: str) -> None:
        if self.held_bytes is not None:
            self.held_bytes.closed(reason)

    def pause_writing(self) -> None:
        self._pause("write")
        if self._loop is not None and self._stall_timer is None:
            self._stall_timer = self._loop.call_later(self.limits.stall_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        self._resume("write")
        self.account()

    # state -------------------------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    @property
    def serving(self) -> int:
        return len(self._serving)

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def buffered_bytes(self) -> int:
        """What this connection holds now: partial frame, unserved frames, requests being served, unwritten answers."""
        written = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self._decoder.buffered + self._backlog_bytes + self._serving_bytes + self._out_bytes + written

    def _held_now(self) -> int:
        """``buffered_bytes`` with the partial frame counted at its announced size (what it will hold once whole)
        and, while answers wait, the kernel's unsent bytes too: uvloop keeps every buffer of a write it started
        until the whole write is done, while reporting only the part the kernel has not taken, so a peer that
        reads nothing pins about twice the reported buffer (measured: 44 MiB held for 20 MiB reported)."""
        decoder = self._decoder
        partial = max(decoder.buffered, decoder.wanted)
        written = self.transport.get_write_buffer_size() if self.transport is not None else 0
        if written and self._fd >= 0:
            written += unsent_in_kernel(self._fd)
        return partial + self._backlog_bytes + self._serving_bytes + self._out_bytes + written

    def account(self) -> None:
        """Report what this connection holds to the process's cap. Called where it changes, and by the server's
        sweep (the kernel drains written answers without telling us)."""
        budget = self.held_bytes
        if budget is not None and self.transport is not None and not self.transport.is_closing():
            held = self._held_now()
            if held != self.held:
                budget.change(self, held)

    def shed(self, reason: str) -> None:
        """Closed by the process's cap (``HeldBytes``), which counted and logged it already."""
        self.abort(reason)

    def close(self, reason: str = "") -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._close_reason = reason
            self.transport.close()

    def abort(self, reason: str) -> None:
        if self.transport is not None:
            self._close_reason = reason
            self.transport.abort()

    # flow control ------------------------------------------------------------------------------------------
    def _pause(self, reason: str) -> None:
        if not self._pause_reasons and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._pause_reasons.add(reason)

    def _resume(self, reason: str) -> None:
        if reason not in self._pause_reasons:
            return
        self._pause_reasons.discard(reason)
        if not self._pause_reasons and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        if not self._pause_reasons and self._backlog:
            self._drain_backlog()

    def _stalled(self) -> None:
        self._stall_timer = None
        self._count_close("unread_answers")
        unread_answers_log.warning(
            "%s: closing the connection from %s: it has not read its answers for %.0f s (%d bytes unread)",
            self.name,
            self.peer,
            self.limits.stall_timeout_s,
            self.transport.get_write_buffer_size() if self.transport is not None else 0,
        )
        self.abort("the peer did not read its answers")

    # writing -----------------------------------------------------------------------------------------------
    def write(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd``; everything queued in one pass of the event loop goes out in one write (one syscall for
        the answers of many concurrent requests instead of one each)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        parts = encode(cmd)
        self._out.extend(parts)
        self._out_bytes += sum(map(len, parts))
        if self._out_bytes + transport.get_write_buffer_size() >= self.limits.write_high_water:
            # a slow reader must meet the transport's limits now, not after the whole read: counting what the
            # transport holds already, so a connection stops reading at write_high_water, not at twice it
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)  # type: ignore[union-attr]

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        self._out_bytes = 0
        transport = self.transport
        if transport is None or transport.is_closing() or not out:
            return
        transport.writelines(_coalesced(out) if len(out) > 2 else out)
        if transport.get_write_buffer_size() > self.limits.write_hard_cap:
            self._count_close("unread_answers")
            unread_answers_log.warning(
                "%s: closing the connection from %s: %d unread bytes of answers exceed the cap of %d",
                self.name,
                self.peer,
                transport.get_write_buffer_size(),
                self.limits.write_hard_cap,
            )
            self.abort("the peer did not read its answers")
            return
        self.account()

    def _next_opaque(self) -> int:
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        return self._opaque

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request and wait for its response (any code); transport failures raise ``RemotingError``."""
        if not self.is_open:
            raise RemotingClosedError(self.peer, self._close_reason or "connection closed")
        if len(self._pending) >= self.limits.max_pending:
            raise RemotingTooManyRequests(self.peer, self.limits.max_pending)
        opaque = cmd.opaque = self._next_opaque()
        cmd.flag &= ~FLAG_ONEWAY
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()  # type: ignore[union-attr]
        self._pending[opaque] = fut
        self.write(cmd)
        timer = self._loop.call_later(timeout_s, self._time_out, opaque, timeout_s, cmd.code)  # type: ignore[union-attr]
        try:
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    def _time_out(self, opaque: int, timeout_s: float, code: int) -> None:
        fut = self._pending.pop(opaque, None)
        if fut is not None and not fut.done():
            fut.set_exception(RemotingTimeoutError(self.peer, timeout_s, f"request code {code}"))

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        if not self.is_open:
            raise RemotingClosedError(self.peer, self._close_reason or "connection closed")
        cmd.opaque = self._next_opaque()
        cmd.flag |= FLAG_ONEWAY
        self.write(cmd)

    # serving -----------------------------------------------------------------------------------------------
    def _on_request(self, cmd: RemotingCommand, size: int) -> None:
        dispatch = self.dispatch
        if cmd.problem is not None:
            result: Any = response_to(
                cmd, ResponseCode.INVALID_PARAMETER, f"request code {cmd.code}: {cmd.problem}"
            )
        elif dispatch is None:
            result = response_to(
                cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        else:
            try:
                result = dispatch(self, cmd)
            except HeaderError as exc:
                result = response_to(cmd, exc.code, str(exc))
            except Exception as exc:  # noqa: BLE001 - logged (rate-limited) and answered SYSTEM_ERROR
                failed_request_log.exception("%s: request code %d from %s failed", self.name, cmd.code, self.peer)
                result = response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if result is None:
            return
        if isinstance(result, DeferredAnswer):  # answered when resolved: no task, no coroutine, no extra turn
            self._serve_deferred(cmd, result, size)
        elif isinstance(result, asyncio.Future):  # answered by a callback: no task, no coroutine per request
            self._serve_future(cmd, result, size)
        elif inspect.isawaitable(result):
            self._serve_later(cmd, result, size)
        elif not cmd.flag & FLAG_ONEWAY:
            self.write(result)

    def _serve_later(self, cmd: RemotingCommand, awaitable: Awaitable[Any], size: int) -> None:
        task = self._loop.create_task(self._finish(cmd, awaitable, size))  # type: ignore[union-attr]
        self._serving.add(task)
        self._serving_bytes += size
        if self._load_full():
            self._pause("load")
        task.add_done_callback(self._served)

    def _serve_deferred(self, cmd: RemotingCommand, answer: DeferredAnswer, size: int) -> None:
        self._serving.add(answer)  # type: ignore[arg-type]  (cancelled like the tasks when the connection closes)
        self._serving_bytes += size
        if self._load_full():
            self._pause("load")

        def deliver(result: Any) -> None:
            self._serving_bytes -= size
            if result is not None and not cmd.flag & FLAG_ONEWAY:
                self.write(result)
            self._served(answer)  # type: ignore[arg-type]

        answer.bind(deliver)

    def _serve_future(self, cmd: RemotingCommand, fut: asyncio.Future, size: int) -> None:
        """A processor that answers through a future (a grouped send): served like a task, answered by callback."""
        self._serving.add(fut)  # type: ignore[arg-type]  (cancelled like the tasks when the connection closes)
        self._serving_bytes += size
        if self._load_full():
            self._pause("load")
        fut.add_done_callback(lambda f: self._future_done(cmd, f, size))

    def _future_done(self, cmd: RemotingCommand, fut: asyncio.Future, size: int) -> None:
        self._serving_bytes -= size
        if not fut.cancelled():
            exc = fut.exception()
            if exc is None:
                result = fut.result()
            elif isinstance(exc, HeaderError):
                result = response_to(cmd, exc.code, str(exc))
            else:
                failed_request_log.log(logging.ERROR, "%s: request code %d from %s failed", self.name, cmd.code,
                                       self.peer, exc_info=exc)  # type: ignore[arg-type]
                result = response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            if result is not None and not cmd.flag & FLAG_ONEWAY:
                self.write(result)
        self._served(fut)  # type: ignore[arg-type]

    def _served(self, task: asyncio.Task) -> None:
        self._serving.discard(task)
        if not self._flush_scheduled:  # else the flush this answer scheduled accounts once for the whole pass
            self.account()
        if "load" in self._pause_reasons and not self._load_full():
            self._resume("load")

    def _load_full(self) -> bool:
        return (len(self._serving) - self._parked >= self.limits.max_requests
                or self._serving_bytes >= self.limits.max_request_bytes)

    @contextlib.asynccontextmanager
    async def parked(self) -> AsyncIterator[None]:
        """Around a request's wait for data (a held pull): it stops counting toward ``max_requests`` meanwhile,
        up to ``max_parked`` such waits; past that it counts as any request does."""
        if self._parked >= self.limits.max_parked:
            yield
            return
        self._parked += 1
        if "load" in self._pause_reasons and not self._load_full():
            self._resume("load")
        try:
            yield
        finally:
            self._parked -= 1

    async def _finish(self, cmd: RemotingCommand, awaitable: Awaitable[Any], size: int) -> None:
        try:
            try:
                result = await awaitable
            except HeaderError as exc:
                result = response_to(cmd, exc.code, str(exc))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged (rate-limited) and answered SYSTEM_ERROR
                failed_request_log.exception("%s: request code %d from %s failed", self.name, cmd.code, self.peer)
                result = response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            if result is not None and not cmd.flag & FLAG_ONEWAY:
                self.write(result)
        finally:
            self._serving_bytes -= size


_TIOCOUTQ = getattr(termios, "TIOCOUTQ", None)  # Linux's SIOCOUTQ: bytes in a TCP socket's send queue, not yet acked


def unsent_in_kernel(fd: int) -> int:
    """Bytes written to socket ``fd`` that the peer has not acknowledged (0 where the kernel cannot say)."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, _TIOCOUTQ, b"\0\0\0\0"))[0]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return 0


# Small parts are joined into buffers of up to JOINED bytes before they reach the transport. A transport keeps per
# buffer an object and its bookkeeping (about 150 bytes), more than a small answer itself; and uvloop keeps a buffer
# it wrote only in part whole while counting just its unwritten rest, so one large joined buffer would cost up to
# twice what the write buffer reports. Parts of SMALL_PART and more (message bodies mapped from the store) stay as
# they are: copying them would cost more than the bookkeeping saves.
SMALL_PART = 4096
JOINED = 64 * 1024


def _coalesced(parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    sizes = list(map(len, parts))
    if max(sizes) < SMALL_PART and sum(sizes) <= JOINED:  # the usual flush: small answers of one loop pass
        return [b"".join(parts)]
    out: list[bytes | memoryview] = []
    run: list[bytes | memoryview] = []
    run_bytes = 0
    for part in parts:
        size = len(part)
        if size >= SMALL_PART:
            if run:
                out.append(b"".join(run) if len(run) > 1 else run[0])
                run, run_bytes = [], 0
            out.append(part)
            continue
        run.append(part)
        run_bytes += size
        if run_bytes >= JOINED:
            out.append(b"".join(run))
            run, run_bytes = [], 0
    if run:
        out.append(b"".join(run) if len(run) > 1 else run[0])
    return out
