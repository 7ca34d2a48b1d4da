"""The client end of the broker's Exchange stream: sends and pulls to one broker over one long-lived gRPC stream.

Why: a unary grpcio call costs about twice the CPU of one message on an open stream, and the producer and the
consumers make one call per batch (see ``broker.grpc.exchange``).

``call(envelope, timeout_s)`` stamps a fresh ``opaque`` on an ``ExchangeRequest``, queues it for the stream, and
returns the response inside the matching ``ExchangeResponse``. Failures look exactly like a failed unary call, so
callers keep one error path: a ``grpc.aio.AioRpcError`` with DEADLINE_EXCEEDED when no answer came within
``timeout_s``, or with the stream's own status when it broke (every request still waiting then fails with it,
whether or not the broker had acted on it, as with a unary call cut off mid-way). The next ``call`` opens a new
stream; grpc's channel reconnects underneath.

Not thread-safe: use from the event loop of the channel.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import grpc

from client.errors import BrokerError
from remoting.codes import ResponseCode
from remoting.pb import broker_pb2, broker_pb2_grpc

_CLOSE = None  # queued to end the request stream


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _Stream:
    """One open Exchange call: its outgoing queue, its pending requests and the task reading its answers."""

    __slots__ = ("call", "outgoing", "pending", "reader")

    def __init__(self) -> None:
        self.outgoing: asyncio.Queue[broker_pb2.ExchangeRequest | None] = asyncio.Queue()
        self.pending: dict[int, tuple[asyncio.Future, asyncio.TimerHandle]] = {}
        self.call: Any = None
        self.reader: asyncio.Task | None = None


class ExchangeClient:
    def __init__(self, stub: broker_pb2_grpc.MessagingStub, addr: str) -> None:
        self.stub = stub
        self.addr = addr
        self._opaque = itertools.count(1)
        self._stream: _Stream | None = None
        self._closed = False

    async def call(self, envelope: broker_pb2.ExchangeRequest, timeout_s: float) -> Any:
        """Send ``envelope`` (its ``opaque`` is overwritten) and return the answer's response of the same kind
        (a SendMessageResponse for ``send``); a broker that does not know the kind raises BrokerError."""
        answer = await self._call(envelope, timeout_s)
        kind = envelope.WhichOneof("request")
        if kind is None or answer.WhichOneof("response") != kind:
            raise BrokerError(
                answer.code or ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                answer.remark or f"no {kind} response on the Exchange stream",
                self.addr,
                request=f"Exchange {kind}",
            )
        return getattr(answer, kind)

    async def _call(self, envelope: broker_pb2.ExchangeRequest, timeout_s: float) -> broker_pb2.ExchangeResponse:
        if self._closed:
            raise rpc_error(grpc.StatusCode.CANCELLED, f"the client's stream to {self.addr} is closed")
        stream = self._stream or self._open()
        loop = asyncio.get_running_loop()
        opaque = next(self._opaque)
        envelope.opaque = opaque
        fut = loop.create_future()
        timer = loop.call_later(max(0.0, timeout_s), self._expire, stream, opaque, timeout_s)
        stream.pending[opaque] = (fut, timer)
        stream.outgoing.put_nowait(envelope)
        return await fut

    def _open(self) -> _Stream:
        stream = self._stream = _Stream()
        stream.call = self.stub.Exchange(self._requests(stream))
        stream.reader = asyncio.get_running_loop().create_task(self._read(stream), name=f"exchange.{self.addr}")
        return stream

    @staticmethod
    async def _requests(stream: _Stream) -> AsyncIterator[broker_pb2.ExchangeRequest]:
        get = stream.outgoing.get
        while True:
            envelope = await get()
            if envelope is _CLOSE:
                return
            yield envelope

    async def _read(self, stream: _Stream) -> None:
        error = rpc_error(grpc.StatusCode.UNAVAILABLE, f"the broker at {self.addr} ended the stream")
        pending = stream.pending
        try:
            async for answer in stream.call:
                entry = pending.pop(answer.opaque, None)
                if entry is None:
                    continue  # its caller timed out already
                fut, timer = entry
                timer.cancel()
                if not fut.done():
                    fut.set_result(answer)
        except grpc.aio.AioRpcError as exc:
            error = exc
        except asyncio.CancelledError:
            error = rpc_error(grpc.StatusCode.CANCELLED, f"the client's stream to {self.addr} was closed")
            raise
        finally:
            if self._stream is stream:
                self._stream = None
            for fut, timer in pending.values():
                timer.cancel()
                if not fut.done():
                    fut.set_exception(error)
            pending.clear()

    @staticmethod
    def _expire(stream: _Stream, opaque: int, timeout_s: float) -> None:
        entry = stream.pending.pop(opaque, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(
                rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer on the Exchange stream within {timeout_s}s")
            )

    async def close(self) -> None:
        """End the stream; requests still waiting fail with CANCELLED."""
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is None:
            return
        stream.outgoing.put_nowait(_CLOSE)
        stream.call.cancel()
        if stream.reader is not None:
            stream.reader.cancel()
            await asyncio.gather(stream.reader, return_exceptions=True)
