"""broker.grpc.exchange.serve in-process: answers in completion order tagged by opaque, SYSTEM_ERROR for a handler
that raises, in-band REQUEST_CODE_NOT_SUPPORTED for an unknown kind, the max_in_flight bound, the drain after the
client's half-close, and cancellation when the stream breaks."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.grpc import exchange
from remoting.codes import ResponseCode
from remoting.pb import broker_pb2

WAIT_S = 2.0


class Requests:
    """A request stream the test feeds; counts the envelopes serve took from it."""

    def __init__(self) -> None:
        self._q: asyncio.Queue = asyncio.Queue()
        self.taken = 0

    def feed(self, envelope: broker_pb2.ExchangeRequest) -> None:
        self._q.put_nowait(envelope)

    def end(self) -> None:
        self._q.put_nowait(StopAsyncIteration)

    def fail(self, exc: BaseException) -> None:
        self._q.put_nowait(exc)

    def __aiter__(self) -> Requests:
        return self

    async def __anext__(self) -> broker_pb2.ExchangeRequest:
        item = await self._q.get()
        if item is StopAsyncIteration:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        self.taken += 1
        return item


class Writer:
    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.written: list[broker_pb2.ExchangeResponse] = []
        self.fail_with = fail_with

    async def __call__(self, response: broker_pb2.ExchangeResponse) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.written.append(response)

    def opaques(self) -> list[int]:
        return [r.opaque for r in self.written]


class Handlers:
    """Send/pull handlers keyed by the request's topic: a topic with a gate waits for it, "boom" raises."""

    def __init__(self, ctx: object) -> None:
        self.ctx = ctx
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.cancelled: list[str] = []

    def gate(self, topic: str) -> asyncio.Event:
        return self.gates.setdefault(topic, asyncio.Event())

    async def _run(self, ctx, req) -> None:
        assert ctx is self.ctx
        self.started.append(req.topic)
        if req.topic == "boom":
            raise ValueError("handler exploded")
        gate = self.gates.get(req.topic)
        if gate is not None:
            try:
                await gate.wait()
            except asyncio.CancelledError:
                self.cancelled.append(req.topic)
                raise

    async def send(self, ctx, req: broker_pb2.SendMessageRequest) -> broker_pb2.SendMessageResponse:
        await self._run(ctx, req)
        return broker_pb2.SendMessageResponse(code=0, remark=f"sent {req.topic}", queue_id=req.queue_id)

    async def pull(self, ctx, req: broker_pb2.PullMessageRequest) -> broker_pb2.PullMessageResponse:
        await self._run(ctx, req)
        return broker_pb2.PullMessageResponse(code=0, remark=f"pulled {req.topic}", records=req.topic.encode())


CTX = object()


@pytest.fixture
def handlers(monkeypatch) -> Handlers:
    h = Handlers(CTX)
    monkeypatch.setitem(exchange._ROUTES, "send", (broker_pb2.SendMessageResponse, h.send, "test.send"))
    monkeypatch.setitem(exchange._ROUTES, "pull", (broker_pb2.PullMessageResponse, h.pull, "test.pull"))
    return h


def send(opaque: int, topic: str, queue_id: int = 0) -> broker_pb2.ExchangeRequest:
    return broker_pb2.ExchangeRequest(
        opaque=opaque, send=broker_pb2.SendMessageRequest(topic=topic, queue_id=queue_id)
    )


def pull(opaque: int, topic: str) -> broker_pb2.ExchangeRequest:
    return broker_pb2.ExchangeRequest(opaque=opaque, pull=broker_pb2.PullMessageRequest(topic=topic))


async def until(condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.005)


async def settle() -> None:
    """Let every ready task run a few steps (so "nothing happened" is a real observation)."""
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


def start(requests: Requests, write: Writer, **kw) -> asyncio.Task:
    return asyncio.ensure_future(exchange.serve(CTX, requests, write, **kw))


async def finish(task: asyncio.Task) -> None:
    await asyncio.wait_for(task, WAIT_S)


async def test_answers_are_written_in_completion_order_with_their_opaque(handlers):
    reqs, out = Requests(), Writer()
    task = start(reqs, out)
    slow = handlers.gate("slow")
    reqs.feed(send(11, "slow", queue_id=3))
    reqs.feed(pull(22, "fast"))
    await until(lambda: len(out.written) == 1, "the fast answer")
    assert out.opaques() == [22]
    fast = out.written[0]
    assert fast.WhichOneof("response") == "pull"
    assert fast.pull.records == b"fast" and fast.pull.remark == "pulled fast"
    assert handlers.started == ["slow", "fast"]
    slow.set()
    await until(lambda: len(out.written) == 2, "the slow answer")
    assert out.opaques() == [22, 11]
    late = out.written[1]
    assert late.WhichOneof("response") == "send"
    assert late.send.remark == "sent slow" and late.send.queue_id == 3
    assert late.code == 0 and not late.remark  # the envelope's own code is for unknown kinds only
    reqs.end()
    await finish(task)


async def test_a_handler_that_raises_gives_a_system_error_answer_and_the_stream_goes_on(handlers):
    reqs, out = Requests(), Writer()
    task = start(reqs, out)
    reqs.feed(send(5, "boom"))
    reqs.feed(pull(6, "boom"))
    reqs.feed(send(7, "fine"))
    reqs.end()
    await finish(task)
    by_opaque = {r.opaque: r for r in out.written}
    assert sorted(by_opaque) == [5, 6, 7]
    failed_send, failed_pull = by_opaque[5], by_opaque[6]
    assert failed_send.WhichOneof("response") == "send"
    assert failed_send.send.code == ResponseCode.SYSTEM_ERROR == 1
    assert "test.send" in failed_send.send.remark and "handler exploded" in failed_send.send.remark
    assert failed_pull.WhichOneof("response") == "pull"
    assert failed_pull.pull.code == ResponseCode.SYSTEM_ERROR
    assert "test.pull" in failed_pull.pull.remark
    assert by_opaque[7].send.code == 0 and by_opaque[7].send.remark == "sent fine"


async def test_an_unknown_kind_is_answered_in_band_without_a_handler(handlers):
    reqs, out = Requests(), Writer()
    task = start(reqs, out)
    reqs.feed(broker_pb2.ExchangeRequest(opaque=42))
    reqs.feed(send(43, "after"))
    reqs.end()
    await finish(task)
    by_opaque = {r.opaque: r for r in out.written}
    assert sorted(by_opaque) == [42, 43]
    unknown = by_opaque[42]
    assert unknown.WhichOneof("response") is None
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert unknown.remark
    assert by_opaque[43].send.remark == "sent after"
    assert handlers.started == ["after"]


async def test_max_in_flight_stops_reading_until_a_request_finishes(handlers):
    reqs, out = Requests(), Writer()
    task = start(reqs, out, max_in_flight=2)
    gate_a, gate_b = handlers.gate("a"), handlers.gate("b")
    for opaque, topic in enumerate(["a", "b", "c", "d"], start=1):
        reqs.feed(send(opaque, topic))
    await until(lambda: handlers.started == ["a", "b"] and reqs.taken == 3, "a and b running, c read")
    await settle()
    assert handlers.started == ["a", "b"], "a third request started beyond max_in_flight=2"
    assert reqs.taken == 3, "the stream was read on while both slots were taken"
    assert out.written == []

    gate_b.set()  # one slot frees: c runs (no gate, finishes at once), then d
    await until(lambda: handlers.started == ["a", "b", "c", "d"], "c and d to start")
    await until(lambda: len(out.written) == 3, "answers of b, c, d")
    assert out.opaques()[0] == 2 and sorted(out.opaques()) == [2, 3, 4]

    gate_e = handlers.gate("e")  # fill the free slot with a blocked request; a second one waits
    reqs.feed(send(5, "e"))
    reqs.feed(send(6, "f"))
    await until(lambda: "e" in handlers.started and reqs.taken == 6, "e running, f read")
    await settle()
    assert "f" not in handlers.started, "f started while a and e held both slots"
    gate_a.set()
    await until(lambda: "f" in handlers.started, "f to start once a finished")
    gate_e.set()
    reqs.end()
    await finish(task)
    assert sorted(out.opaques()) == [1, 2, 3, 4, 5, 6]


async def test_after_the_client_half_closes_every_in_flight_answer_is_written_before_serve_returns(handlers):
    reqs, out = Requests(), Writer()
    task = start(reqs, out)
    gates = [handlers.gate(t) for t in ("x", "y", "z")]
    reqs.feed(send(1, "x"))
    reqs.feed(pull(2, "y"))
    reqs.feed(send(3, "z"))
    reqs.end()
    await until(lambda: len(handlers.started) == 3, "three handlers running")
    await settle()
    assert not task.done(), "serve returned with requests still in flight"
    gates[1].set()
    await until(lambda: out.opaques() == [2], "y's answer")
    await settle()
    assert not task.done()
    gates[2].set()
    gates[0].set()
    await finish(task)
    assert sorted(out.opaques()) == [1, 2, 3]
    assert handlers.cancelled == []


async def test_a_broken_request_stream_raises_and_cancels_the_in_flight_handlers(handlers):
    reqs, out = Requests(), Writer()
    task = start(reqs, out)
    handlers.gate("held")
    reqs.feed(send(1, "held"))
    await until(lambda: handlers.started == ["held"], "the held handler")
    reqs.fail(ConnectionResetError("stream broke"))
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(task, WAIT_S)
    await until(lambda: handlers.cancelled == ["held"], "the held handler to be cancelled")
    assert out.written == []


async def test_a_failing_write_raises_and_cancels_the_in_flight_handlers(handlers):
    reqs, out = Requests(), Writer(fail_with=RuntimeError("client went away"))
    task = start(reqs, out)
    handlers.gate("held")
    reqs.feed(send(1, "held"))
    await until(lambda: handlers.started == ["held"], "the held handler")
    reqs.feed(send(2, "quick"))
    with pytest.raises(RuntimeError, match="client went away"):
        await asyncio.wait_for(task, WAIT_S)
    await until(lambda: handlers.cancelled == ["held"], "the held handler to be cancelled")
