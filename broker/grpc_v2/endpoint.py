"""GrpcEndpoint: the grpc.aio server of ``MessagingService`` on ``grpcServerPort`` (0 in the config turns it off;
the broker binds the port before touching the store, so a taken port fails at start with the key named).

On a master the pop service (checkpoints, acks, revive) starts first, rebuilding its state from the revive queue.
Stop: release held long polls, stop accepting, give RPCs in flight ``grace_s``, then cancel.

Message size: gRPC refuses a request over ``grpc.max_receive_message_length`` itself, before any handler, with
RESOURCE_EXHAUSTED "Received message larger than max" (its text; no hook changes it). The limit is maxMessageSize
+ ``ENVELOPE_BYTES`` (1 MiB), so a body somewhat over maxMessageSize still reaches SendMessage and gets
MESSAGE_BODY_TOO_LARGE saying to split it; only a request over a whole MiB beyond gets gRPC's refusal. The
official clients never send one: they check the body against the max_body_size of the settings answer first.

TLS (``tls.server.mode``, ``remoting.tls``): enforcing serves gRPC's own TLS on the port; permissive puts
``tls_front.PermissiveFront`` on the port, which sorts connections by their first byte onto two loopback ports
(gRPC serves one kind per port). With ``tls.server.need.client.auth`` gRPC requires a client certificate from
``tls.server.trustCertPath``'s CA. A plaintext connection to an enforcing port is closed by gRPC core's handshake
(logged by gRPC, not by pyrmq's rate-limited lines).

Bounds per connection (gRPC core enforces them; grpcio 1.85 exposes no ResourceQuota to Python, so there is no
process-wide byte cap here as on the remoting ports):
- ``grpcMaxConcurrentStreams`` (``grpc.max_concurrent_streams``, 256): streams open at once. It is also what tames
  a rapid-reset flood (streams opened and reset at once, CVE-2023-44487): without it 4 peers resetting 1.1 million
  streams in 25 s grew the broker by 100 MiB; with it core refuses the excess cheaply (about 20 MiB for 1 million).
- ``grpcMaxConnectionAgeMillis`` (``grpc.max_connection_age_ms``, 30 min, then ``AGE_GRACE_MS`` for calls in
  flight, more than a 20 s long poll): every connection ends with a GOAWAY, which the clients follow by
  reconnecting. gRPC has no deadline for a message to arrive whole and does not say which peer resets streams, so
  this is what closes a flooding or trickling peer.
- ``grpcMaxConnectionIdleMillis`` (``grpc.max_connection_idle_ms``, 120 s as ``serverChannelMaxIdleTimeSeconds``):
  a connection without streams for that long gets a GOAWAY (an official client always keeps its Telemetry stream).
"""

from __future__ import annotations

import logging

import grpc

from broker.context import BrokerContext
from broker.grpc_v2.auth import V2Auth
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from broker.grpc_v2.pop.service import PopService
from broker.grpc_v2.service import MessagingService
from broker.grpc_v2.tls_front import BACKEND_HOST, PermissiveFront
from remoting.tls import TlsConfig, TlsMode

log = logging.getLogger(__name__)

ENVELOPE_BYTES = 1024 * 1024
AGE_GRACE_MS = 60_000


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """gRPC's TLS from the same files as the remoting ports (read once here; the config check loaded them)."""
    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    trust = read(tls.tls_server_trust_cert_path) if tls.tls_server_trust_cert_path else None
    return grpc.ssl_server_credentials([(read(tls.tls_server_key_path), read(tls.tls_server_cert_path))],
                                       root_certificates=trust, require_client_auth=tls.tls_server_need_client_auth)


class GrpcEndpoint:
    def __init__(self, ctx: BrokerContext, host: str, port: int, *, auth: V2Auth | None = None,
                 on_refused=None) -> None:
        """``on_refused(reason)``: counts the permissive TLS front's refusals (``PermissiveFront``)."""
        self.ctx = ctx
        self.on_refused = on_refused
        self.host = host
        self.port = port
        self.metrics = V2Metrics(ctx.metrics)
        self.pop = None if ctx.is_slave else PopService(ctx, self.metrics)  # a slave refuses pops, naming why
        self.metrics.watch_pop(self.pop)
        ctx.pop = self.pop  # GET_CONSUME_STATS reports pop groups' in-flight messages
        self.service = MessagingService(ctx, self.pop, self.metrics)
        self.service.auth = auth  # ACL 2.0 (None: off)
        if self.pop is not None:
            self.pop.client_alive = self.service.clients.alive  # auto_renew holds messages while the client lives
        self._server: grpc.aio.Server | None = None
        self._front: PermissiveFront | None = None

    async def start(self) -> int:
        limit = self.ctx.max_message_size + ENVELOPE_BYTES
        broker = self.ctx.settings.broker
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
            ("grpc.max_concurrent_streams", broker.grpc_max_concurrent_streams),
            ("grpc.max_connection_age_ms", broker.grpc_max_connection_age_millis),
            ("grpc.max_connection_age_grace_ms", AGE_GRACE_MS),
            ("grpc.max_connection_idle_ms", broker.grpc_max_connection_idle_millis),
            # a TLS handshake that stops halfway ends here (gRPC's own default is 120 s)
            ("grpc.server_handshake_timeout_ms", self.ctx.settings.tls.tls_server_handshake_timeout_millis),
        ])
        if self.pop is not None:
            await self.pop.start()
        sgrpc.add_MessagingServiceServicer_to_server(self.service, server)
        tls = self.ctx.settings.tls
        try:
            if tls.mode is TlsMode.DISABLED:
                bound = server.add_insecure_port(f"{self.host}:{self.port}")
            elif tls.mode is TlsMode.ENFORCING:
                bound = server.add_secure_port(f"{self.host}:{self.port}", server_credentials(tls))
            else:  # permissive: gRPC serves one kind per port, so a front sorts them onto two loopback ports
                tls_port = server.add_secure_port(f"{BACKEND_HOST}:0", server_credentials(tls))
                plain_port = server.add_insecure_port(f"{BACKEND_HOST}:0")
                context = tls.server_context()
                assert context is not None
                self._front = PermissiveFront(self.host, self.port, tls_port=tls_port, plain_port=plain_port,
                                              context=context, handshake_timeout_s=tls.handshake_timeout_s,
                                              on_refused=self.on_refused)
                bound = await self._front.start()
        except (RuntimeError, OSError) as exc:
            raise OSError(f"grpcServerPort {self.port} cannot be bound ({exc}); choose another port, or 0 in"
                          " grpcServerPort turns the RocketMQ 5 endpoint off") from None
        self.port = self.service.routes.grpc_port = bound
        await server.start()
        self._server = server
        log.info("RocketMQ 5 gRPC endpoint (apache.rocketmq.v2.MessagingService) on %s:%d (TLS %s)", self.host, bound,
                 tls.mode.value)
        return bound

    async def stop(self, grace_s: float) -> None:
        if self.pop is not None:
            await self.pop.stop()  # releases held long polls, so the server drains at once
        if self._front is not None:
            self._front.close()
            self._front = None
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        await self.service.routes.close()
