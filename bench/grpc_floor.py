"""The grpcio floor of a SendMessage call, for ``bench.rocketmq5_bench``: what a call costs a server that does
nothing, so the broker's figure can be split into gRPC's part and pyrmq's, and what other grpcio server kinds
and options would cost.

- ``python -m bench.grpc_floor serve [KIND]``: a ``MessagingService`` whose SendMessage answers OK with one entry
  at once; prints its port. KIND (``SERVER_KINDS``): ``aio`` (grpc.aio on the loop pyrmq's processes use,
  ``common.event_loop``, with the endpoint's options), ``aio-plain`` (grpc.aio, no options at all),
  ``aio-nocompress`` (compression explicitly off), ``sync4`` / ``sync16`` (grpcio's sync server with a thread
  pool of 4 or 16 workers), ``sync4-reuse`` (sync4 with ``grpc.so_reuseport`` on), ``sync4-loop`` (sync4 whose
  handler hands the call to an asyncio loop in another thread and waits for the answer: what the sync server
  would cost pyrmq, whose store lives on its event loop).
- ``python -m bench.grpc_floor drive ADDR COUNT TOPIC [INFLIGHT]``: a plain grpc client sending SendMessage calls
  with the headers the official client sets, one at a time or INFLIGHT at once (``future`` calls, as the official
  client's ``send_async``); prints ``ready`` after a first call (channel up), waits for a line on stdin, sends
  COUNT calls, prints ``done``. Driving the broker and the floor servers with the same client takes the official
  client's own behaviour out of the comparison.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from concurrent import futures

import grpc

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from common import event_loop

HEADERS = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"),
           ("x-mq-client-id", "bench-grpc-floor"), ("x-mq-namespace", "")]
ENDPOINT_OPTIONS = [("grpc.so_reuseport", 0), ("grpc.max_concurrent_streams", 256)]
SERVER_KINDS = ("aio", "aio-plain", "aio-nocompress", "sync4", "sync16", "sync4-reuse", "sync4-loop")


def _answer(request) -> spb.SendMessageResponse:
    return spb.SendMessageResponse(status=pb.Status(code=pb.Code.OK, message="OK"), entries=[
        spb.SendResultEntry(status=pb.Status(code=pb.Code.OK, message="OK"),
                            message_id=request.messages[0].system_properties.message_id, offset=0)])


class NullService(sgrpc.MessagingServiceServicer):
    async def SendMessage(self, request, context):
        return _answer(request)


class SyncNullService(sgrpc.MessagingServiceServicer):
    def SendMessage(self, request, context):
        return _answer(request)


class LoopNullService(sgrpc.MessagingServiceServicer):
    """The sync server's worker waits for a coroutine on the loop thread (``run_coroutine_threadsafe``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    async def _answer(self, request):
        return _answer(request)

    def SendMessage(self, request, context):
        return asyncio.run_coroutine_threadsafe(self._answer(request), self.loop).result(10)


async def serve_aio(kind: str) -> None:
    if kind == "aio-plain":
        server = grpc.aio.server()
    elif kind == "aio-nocompress":
        server = grpc.aio.server(options=ENDPOINT_OPTIONS, compression=grpc.Compression.NoCompression)
    else:
        server = grpc.aio.server(options=ENDPOINT_OPTIONS)
    sgrpc.add_MessagingServiceServicer_to_server(NullService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def serve_sync(kind: str) -> None:
    workers = 16 if kind.startswith("sync16") else 4
    options = [("grpc.so_reuseport", 1 if kind.endswith("-reuse") else 0), ("grpc.max_concurrent_streams", 256)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=options)
    if kind.endswith("-loop"):
        started = threading.Event()
        holder: list[asyncio.AbstractEventLoop] = []

        async def loop_forever() -> None:
            holder.append(asyncio.get_running_loop())
            started.set()
            await asyncio.Event().wait()

        threading.Thread(target=event_loop.run, args=(loop_forever(),), daemon=True).start()
        started.wait(10)
        service = LoopNullService(holder[0])
    else:
        service = SyncNullService()
    sgrpc.add_MessagingServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def serve(kind: str) -> None:
    if kind not in SERVER_KINDS:
        raise SystemExit(f"unknown server kind {kind!r}; one of {', '.join(SERVER_KINDS)}")
    if kind.startswith("sync"):
        serve_sync(kind)
    else:
        event_loop.run(serve_aio(kind))


def request(topic: str, i: int) -> spb.SendMessageRequest:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=pb.MessageType.NORMAL,
                             body_encoding=pb.Encoding.IDENTITY)
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic), body=f"m{i}".encode(),
                                                       system_properties=sp)])


def drive(addr: str, count: int, topic: str, inflight: int = 1) -> None:
    with grpc.insecure_channel(addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)

        def metadata() -> list[tuple[str, str]]:
            return [*HEADERS, ("x-mq-request-id", uuid.uuid4().hex)]

        def check(answer) -> None:
            if answer.status.code != pb.Code.OK:
                raise SystemExit(f"SendMessage answered {answer.status}")

        check(stub.SendMessage(request(topic, -1), metadata=metadata(), timeout=10))
        print("ready", flush=True)
        sys.stdin.readline()
        if inflight <= 1:
            for i in range(count):
                check(stub.SendMessage(request(topic, i), metadata=metadata(), timeout=10))
        else:
            slots = threading.BoundedSemaphore(inflight)
            finished = threading.Semaphore(0)
            failures: list[BaseException] = []

            def done(fut) -> None:
                try:
                    check(fut.result())
                except BaseException as exc:  # noqa: BLE001 - reported after the run
                    failures.append(exc)
                slots.release()
                finished.release()

            for i in range(count):
                slots.acquire()
                stub.SendMessage.future(request(topic, i), metadata=metadata(), timeout=30).add_done_callback(done)
            for _ in range(count):
                finished.acquire()
            if failures:
                raise SystemExit(f"{len(failures)} calls failed, first: {failures[0]!r}")
        print("done", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) <= 3:
        serve(sys.argv[2] if len(sys.argv) == 3 else "aio")
    elif sys.argv[1:2] == ["drive"] and len(sys.argv) in (5, 6):
        drive(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]) if len(sys.argv) == 6 else 1)
    else:
        raise SystemExit("usage: python -m bench.grpc_floor serve [KIND] | drive ADDR COUNT TOPIC [INFLIGHT]")
