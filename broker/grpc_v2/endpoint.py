"""GrpcEndpoint: the grpc.aio server of ``MessagingService`` on ``grpcServerPort`` (0 in the config turns it off;
the broker binds the port before touching the store, so a taken port fails at start with the key named).

On a master the pop service (checkpoints, acks, revive) starts first, rebuilding its state from the revive queue.
Stop: release held long polls, stop accepting, give RPCs in flight ``grace_s``, then cancel.

Message size: gRPC refuses a request over ``grpc.max_receive_message_length`` itself, before any handler, with
RESOURCE_EXHAUSTED "Received message larger than max" (its text; no hook changes it). The limit is maxMessageSize
+ ``ENVELOPE_BYTES`` (1 MiB), so a body somewhat over maxMessageSize still reaches SendMessage and gets
MESSAGE_BODY_TOO_LARGE saying to split it; only a request over a whole MiB beyond gets gRPC's refusal. The
official clients never send one: they check the body against the max_body_size of the settings answer first.
"""

from __future__ import annotations

import logging

import grpc

from broker.context import BrokerContext
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from broker.grpc_v2.pop.service import PopService
from broker.grpc_v2.service import MessagingService

log = logging.getLogger(__name__)

ENVELOPE_BYTES = 1024 * 1024


class GrpcEndpoint:
    def __init__(self, ctx: BrokerContext, host: str, port: int) -> None:
        self.ctx = ctx
        self.host = host
        self.port = port
        self.metrics = V2Metrics(ctx.metrics)
        self.pop = None if ctx.is_slave else PopService(ctx, self.metrics)  # a slave refuses pops, naming why
        self.metrics.watch_pop(self.pop)
        ctx.pop = self.pop  # GET_CONSUME_STATS reports pop groups' in-flight messages
        self.service = MessagingService(ctx, self.pop, self.metrics)
        if self.pop is not None:
            self.pop.client_alive = self.service.clients.alive  # auto_renew holds messages while the client lives
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        limit = self.ctx.max_message_size + ENVELOPE_BYTES
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
        ])
        if self.pop is not None:
            await self.pop.start()
        sgrpc.add_MessagingServiceServicer_to_server(self.service, server)
        try:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as exc:
            raise OSError(f"grpcServerPort {self.port} cannot be bound ({exc}); choose another port, or 0 in"
                          " grpcServerPort turns the RocketMQ 5 endpoint off") from None
        self.port = self.service.routes.grpc_port = bound
        await server.start()
        self._server = server
        log.info("RocketMQ 5 gRPC endpoint (apache.rocketmq.v2.MessagingService) on %s:%d", self.host, bound)
        return bound

    async def stop(self, grace_s: float) -> None:
        if self.pop is not None:
            await self.pop.stop()  # releases held long polls, so the server drains at once
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        await self.service.routes.close()
