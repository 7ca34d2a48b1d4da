"""The thin ``MessagingService`` servicer: each RPC validates the client id, calls one handler module and
answers. No exception leaves a handler as a gRPC UNKNOWN: a failure becomes INTERNAL_SERVER_ERROR in the
response's status, with the error named (and the traceback logged).

Handlers: ``route`` (QueryRoute, QueryAssignment), ``send`` (SendMessage), ``settings`` (the Telemetry reply),
``pop`` (ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue), ``transaction``
(EndTransaction). What pyrmq does not do answers UNSUPPORTED naming the feature: RecallMessage, PullMessage, UpdateOffset, GetOffset,
QueryOffset.

With ACL 2.0 on, every RPC is checked first (``auth``: the caller's signature, then RocketMQ's grants for the
request); a refusal is the response's status, UNAUTHORIZED or FORBIDDEN, saying which check failed.

Heartbeat and every Telemetry settings command also register the client in the broker's client table
(``presence``), so consumerConnection and consumerProgress show it; NotifyClientTermination takes it out.

Telemetry: the first command must be ``settings`` (within ``SETTINGS_WAIT_S``, else the stream ends with
BAD_REQUEST saying so: the official client sends its Settings as soon as the stream opens); each settings command
is answered with ``settings.answer``; other client commands are ignored. Once its settings are in, a stream also
carries the broker's transaction checks to the client (RecoverOrphanedTransactionCommand, ``presence.V2Channel``). At most ``MAX_STREAMS_PER_CLIENT`` (16)
streams per client id, ``MAX_STREAMS_PER_CONNECTION`` (64) per connection (checked first, so a client rotating
client ids records none) and ``MAX_STREAMS`` (4096) in all; the rest are answered TOO_MANY_REQUESTS at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import grpc

from broker.context import BrokerContext
from broker.grpc_v2 import codes, filters, presence, route, send, settings, transaction
from broker.grpc_v2.clients import MAX_STREAMS_PER_CLIENT, V2Clients
from broker.grpc_v2.cluster import ClusterRoutes
from broker.grpc_v2.observe import V2Metrics
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from broker.grpc_v2.tls_front import real_peer
from common.log import RateLimitedLog

log = logging.getLogger(__name__)
FAILURE_LOG_EVERY_S = 10.0
# One rate limit per RPC name (a fixed set): a client repeating a call that fails on the broker, say a receive on
# a queue holding a message the broker cannot convert, gets its answer each time but writes one traceback per
# interval into the log, with the count of those left out.
_failure_logs: dict[str, RateLimitedLog] = {}


def log_failure(rpc: str) -> None:
    """Log the exception being handled for ``rpc``, at most once per ``FAILURE_LOG_EVERY_S``."""
    limited = _failure_logs.get(rpc)
    if limited is None:
        limited = _failure_logs[rpc] = RateLimitedLog(log, FAILURE_LOG_EVERY_S)
    limited.exception("%s failed", rpc)

CLIENT_ID_HEADER = "x-mq-client-id"
LANGUAGE_HEADER = "x-mq-language"
SETTINGS_WAIT_S = 10.0
MAX_STREAMS = 4096
MAX_STREAMS_PER_CONNECTION = 64


def _header(context: grpc.aio.ServicerContext, name: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return ""


def client_id(context: grpc.aio.ServicerContext) -> str:
    return _header(context, CLIENT_ID_HEADER)


def peer_host(context: grpc.aio.ServicerContext) -> tuple[str, int]:
    """``ipv4:1.2.3.4:5678`` -> ("1.2.3.4", 5678); anything else -> ("127.0.0.1", 0). A connection spliced by the
    permissive TLS front (``tls_front``) is reported as its client's address, not the front's."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    if kind in ("ipv4", "ipv6") and port.isdigit():
        return real_peer(host.strip("[]") or "127.0.0.1", int(port))
    return "127.0.0.1", 0


def _guarded(response_cls):
    """Unary handler wrapper: a missing client id is CLIENT_ID_REQUIRED; an exception INTERNAL_SERVER_ERROR."""

    def wrap(fn):
        @functools.wraps(fn)
        async def handler(self, request, context):
            if not client_id(context):
                return response_cls(status=codes.status(
                    pb.Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID_HEADER} header is missing; RocketMQ 5 clients set it"))
            started = time.perf_counter()
            refusal = self.refusal(request, context)
            if refusal is not None:
                self.metrics.on_rpc(fn.__name__, refusal.code, started)
                return response_cls(status=refusal)
            try:
                response = await fn(self, request, context)
            except Exception as exc:
                log_failure(fn.__name__)
                response = response_cls(status=codes.status(
                    pb.Code.INTERNAL_SERVER_ERROR, f"{fn.__name__} failed on broker: {exc!r}; see the broker log"))
            self.metrics.on_rpc(fn.__name__, response.status.code, started)
            return response

        return handler

    return wrap


_USE_POP = "use a SimpleConsumer or PushConsumer, or the remoting protocol"


def abandon(fut: asyncio.Future) -> None:
    """Cancel a read the stream no longer waits for, and take its outcome when it comes: a read that finished
    anyway (the client's end of the stream, StopAsyncIteration, racing the cancel) would otherwise be logged as
    "Task exception was never retrieved"."""
    fut.cancel()
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())


def _unsupported(rpc: str, feature: str, what_to_do: str):
    """The unary handler of an RPC pyrmq does not serve: UNSUPPORTED naming the feature, never a gRPC UNKNOWN."""
    response_cls = getattr(spb, f"{rpc}Response")

    async def handler(self, request, context):
        return response_cls(status=codes.unsupported(feature, what_to_do))

    handler.__name__ = handler.__qualname__ = rpc  # what _guarded logs and counts the RPC as
    return _guarded(response_cls)(handler)


class MessagingService(sgrpc.MessagingServiceServicer):
    def __init__(self, ctx: BrokerContext, pop=None, metrics: V2Metrics | None = None) -> None:
        self.ctx = ctx
        self.pop = pop  # broker.grpc_v2.pop.service.PopService, None on a slave
        self.metrics = metrics or V2Metrics(None)
        self.clients = V2Clients()
        self.routes = ClusterRoutes(ctx)  # its grpc_port (the bound one) is set by the endpoint before serving
        self._streams = 0
        self._streams_by_peer: dict[str, int] = {}  # context.peer() (one per connection) -> open Telemetry streams
        self.auth = None  # broker.grpc_v2.auth.V2Auth when ACL 2.0 is on, set by the endpoint

    def refusal(self, request, context, *, authenticate: bool = True) -> pb.Status | None:
        """ACL 2.0's answer to ``request`` (None: serve it; always None when ACL is off)."""
        if self.auth is None:
            return None
        host, port = peer_host(context)
        return self.auth.check(request, context, f"{host}:{port}", authenticate=authenticate)

    # routes and sessions ------------------------------------------------------------------------------------
    @_guarded(spb.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        return await route.query_route(self.ctx, self.routes, request)

    @_guarded(spb.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        return await route.query_assignment(self.ctx, self.routes, request)

    @_guarded(spb.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        client = self.clients.touch(client_id(context))
        if client is None:
            return spb.HeartbeatResponse(status=codes.status(
                pb.Code.TOO_MANY_REQUESTS, f"this broker tracks {self.clients.max_clients} clients already; retry later"))
        client.client_type = request.client_type
        if request.HasField("group"):
            client.group = request.group.name
        self._publish(client, context)
        return spb.HeartbeatResponse(status=codes.OK)

    def _publish(self, client, context) -> None:
        """The client in the broker's client table (operators' views), as RocketMQ's proxy registers it."""
        if client.channel is None:
            host, port = peer_host(context)
            client.channel = presence.V2Channel(client.client_id, f"{host}:{port}")
        presence.publish(self.ctx, client, client.channel, _header(context, LANGUAGE_HEADER))

    @_guarded(spb.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context):
        client = self.clients.get(client_id(context))
        if client is not None and client.channel is not None:
            presence.withdraw(self.ctx, client.channel)
        self.clients.remove(client_id(context))
        return spb.NotifyClientTerminationResponse(status=codes.OK)

    async def Telemetry(self, request_iterator, context):
        cid = client_id(context)
        if not cid:
            yield spb.TelemetryCommand(status=codes.status(
                pb.Code.CLIENT_ID_REQUIRED, "the x-mq-client-id header is missing; RocketMQ 5 clients set it"))
            return
        peer = context.peer() or ""
        client = None
        if self._streams_by_peer.get(peer, 0) < MAX_STREAMS_PER_CONNECTION and self._streams < MAX_STREAMS:
            client = self.clients.touch(cid)
        if client is None or client.streams >= MAX_STREAMS_PER_CLIENT:
            yield spb.TelemetryCommand(status=codes.status(
                pb.Code.TOO_MANY_REQUESTS,
                f"too many Telemetry streams (at most {MAX_STREAMS_PER_CLIENT} per client id,"
                f" {MAX_STREAMS_PER_CONNECTION} per connection, {MAX_STREAMS} in all); close idle clients"))
            return
        client.streams += 1
        self._streams += 1
        self._streams_by_peer[peer] = self._streams_by_peer.get(peer, 0) + 1
        reading: asyncio.Future | None = None
        pushing: asyncio.Future | None = None
        channel = None  # the client's V2Channel once its settings were published: checks go out on this stream
        try:
            iterator = request_iterator.__aiter__()
            first = True
            proven = False
            while True:
                try:
                    if first:
                        command = await asyncio.wait_for(iterator.__anext__(), SETTINGS_WAIT_S)
                    else:
                        if channel is None and client.channel is not None:
                            channel = client.channel
                            channel.streams += 1
                        reading = reading or asyncio.ensure_future(iterator.__anext__())
                        if channel is not None:
                            pushing = pushing or asyncio.ensure_future(channel.outbox.get())
                        await asyncio.wait([f for f in (reading, pushing) if f is not None],
                                           return_when=asyncio.FIRST_COMPLETED)
                        if pushing is not None and pushing.done():
                            check, pushing = pushing.result(), None
                            recover = transaction.recover_command(self.ctx, check)
                            if recover is not None:
                                yield recover
                        if not reading.done():
                            continue
                        command, reading = reading.result(), None
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    yield spb.TelemetryCommand(status=codes.status(
                        pb.Code.BAD_REQUEST, f"no settings within {SETTINGS_WAIT_S:.0f} s of opening the Telemetry"
                        " stream; a client sends its Settings first"))
                    return
                client.last_seen = time.monotonic()
                refusal = self.refusal(command, context, authenticate=not proven)
                if refusal is not None:  # the stream ends: a client with better credentials opens another
                    yield spb.TelemetryCommand(status=refusal)
                    return
                proven = True  # a stream's headers never change: authenticated once, each command authorized
                if command.WhichOneof("command") == "settings":
                    first = False
                    client.settings = command.settings
                    if command.settings.HasField("client_type"):
                        client.client_type = command.settings.client_type
                    if command.settings.WhichOneof("pub_sub") == "subscription":
                        client.group = command.settings.subscription.group.name
                    refusal = filters.settings_refusal(self.ctx, command.settings)
                    if refusal is not None:  # not registered: the client may send corrected settings
                        yield spb.TelemetryCommand(status=refusal)
                        continue
                    self._publish(client, context)
                    yield spb.TelemetryCommand(status=codes.OK, settings=settings.answer(self.ctx, command.settings))
                elif first:
                    yield spb.TelemetryCommand(status=codes.status(
                        pb.Code.BAD_REQUEST, "the first Telemetry command must be settings"))
                    return
        finally:
            for pending in (reading, pushing):
                if pending is not None:
                    abandon(pending)
            if channel is not None:
                channel.streams -= 1
            client.streams -= 1
            self._streams -= 1
            left = self._streams_by_peer.pop(peer) - 1
            if left:
                self._streams_by_peer[peer] = left

    # sending ------------------------------------------------------------------------------------------------
    @_guarded(spb.SendMessageResponse)
    async def SendMessage(self, request, context):
        return await send.send_message(self.ctx, request, peer_host(context), grouped=True)

    # pop consumption ----------------------------------------------------------------------------------------
    def _no_pop(self, what: str) -> pb.Status:
        if self.ctx.is_slave:
            return codes.status(pb.Code.FORBIDDEN, self.ctx.slave_refusal(f"{what} on the master"))
        return codes.unsupported("pop consumption", "this broker was started without it")

    async def ReceiveMessage(self, request, context):
        if not client_id(context):
            yield spb.ReceiveMessageResponse(status=codes.status(
                pb.Code.CLIENT_ID_REQUIRED, "the x-mq-client-id header is missing; RocketMQ 5 clients set it"))
            return
        refusal = self.refusal(request, context)
        if refusal is not None:
            yield spb.ReceiveMessageResponse(status=refusal)
            return
        if self.pop is None:
            yield spb.ReceiveMessageResponse(status=self._no_pop("receive"))
            return
        started, code = time.perf_counter(), pb.Code.INTERNAL_SERVER_ERROR
        try:
            async for response in self.pop.receive(request, context.time_remaining(), client_id(context)):
                if response.HasField("status"):
                    code = response.status.code
                yield response
        except Exception as exc:
            log_failure("ReceiveMessage")
            yield spb.ReceiveMessageResponse(status=codes.status(
                pb.Code.INTERNAL_SERVER_ERROR, f"ReceiveMessage failed on broker: {exc!r}; see the broker log"))
        finally:
            self.metrics.on_rpc("ReceiveMessage", code, started, long_polling=True)

    @_guarded(spb.AckMessageResponse)
    async def AckMessage(self, request, context):
        if self.pop is None:
            return spb.AckMessageResponse(status=self._no_pop("ack"))
        return await self.pop.ack(request)

    @_guarded(spb.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        if self.pop is None:
            return spb.ChangeInvisibleDurationResponse(status=self._no_pop("change invisible durations"))
        return await self.pop.change_invisible_duration(request)

    @_guarded(spb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        if self.pop is None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=self._no_pop("dead-letter messages"))
        return await self.pop.forward_to_dlq(request)

    # transactions -------------------------------------------------------------------------------------------
    @_guarded(spb.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        return await transaction.end(self.ctx, request)

    # not supported ------------------------------------------------------------------------------------------
    RecallMessage = _unsupported("RecallMessage", "RecallMessage (cancelling a delay message)",
                                 "consumers must skip a message they no longer want")
    UpdateOffset = _unsupported("UpdateOffset", "UpdateOffset (the v2 pull consumer)", _USE_POP)
    GetOffset = _unsupported("GetOffset", "GetOffset (the v2 pull consumer)", _USE_POP)
    QueryOffset = _unsupported("QueryOffset", "QueryOffset (the v2 pull consumer)", _USE_POP)

    async def PullMessage(self, request, context):
        yield spb.PullMessageResponse(status=codes.unsupported("PullMessage (the v2 pull consumer)", _USE_POP))
