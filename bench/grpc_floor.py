"""The grpc.aio floor of a SendMessage call, for ``bench.rocketmq5_bench``: what a call costs a server that does
nothing, so the broker's figure can be split into gRPC's part and pyrmq's.

- ``python -m bench.grpc_floor serve``: a grpc.aio ``MessagingService`` on the loop pyrmq's processes use
  (``common.event_loop``) whose SendMessage answers OK with one entry at once; prints its port.
- ``python -m bench.grpc_floor drive ADDR COUNT TOPIC``: a plain grpc client sending SendMessage calls one at a
  time with the headers the official client sets; prints ``ready`` after a first call (channel up), waits for a
  line on stdin, sends COUNT calls, prints ``done``. Driving the broker and the floor server with the same client
  takes the official client's own behaviour out of the comparison.
"""

from __future__ import annotations

import sys
import uuid

import grpc

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from common import event_loop

HEADERS = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"),
           ("x-mq-client-id", "bench-grpc-floor"), ("x-mq-namespace", "")]


class NullService(sgrpc.MessagingServiceServicer):
    async def SendMessage(self, request, context):
        return spb.SendMessageResponse(status=pb.Status(code=pb.Code.OK, message="OK"), entries=[
            spb.SendResultEntry(status=pb.Status(code=pb.Code.OK, message="OK"),
                                message_id=request.messages[0].system_properties.message_id, offset=0)])


async def serve() -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])  # the endpoint's options, less the size limits
    sgrpc.add_MessagingServiceServicer_to_server(NullService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def request(topic: str, i: int) -> spb.SendMessageRequest:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=pb.MessageType.NORMAL,
                             body_encoding=pb.Encoding.IDENTITY)
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic), body=f"m{i}".encode(),
                                                       system_properties=sp)])


def drive(addr: str, count: int, topic: str) -> None:
    with grpc.insecure_channel(addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)

        def call(i: int) -> None:
            md = [*HEADERS, ("x-mq-request-id", uuid.uuid4().hex)]
            answer = stub.SendMessage(request(topic, i), metadata=md, timeout=10)
            if answer.status.code != pb.Code.OK:
                raise SystemExit(f"SendMessage answered {answer.status}")

        call(-1)
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(count):
            call(i)
        print("done", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        event_loop.run(serve())
    elif sys.argv[1:2] == ["drive"] and len(sys.argv) == 5:
        drive(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit("usage: python -m bench.grpc_floor serve | drive ADDR COUNT TOPIC")
