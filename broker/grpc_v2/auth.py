"""ACL 2.0 on the gRPC v2 endpoint: who the caller is (the ``authorization`` and ``x-mq-date-time`` headers,
``remoting.acl_signature``) and what each v2 request needs, checked by the broker's one ``AuthGate`` (users,
policies, the per-address failure throttle and the refusal log are the remoting ports').

What a request needs is RocketMQ's ``DefaultAuthorizationContextBuilder`` for v2 messages: SendMessage is Pub on the
topic (pyrmq checks every message's topic, RocketMQ only the first's), EndTransaction Pub on the topic,
ReceiveMessage / AckMessage / ForwardMessageToDeadLetterQueue / QueryAssignment Sub on the group and the topic,
ChangeInvisibleDuration Sub on the group, QueryRoute Pub or Sub on the topic, a consumer's Heartbeat and
NotifyClientTermination Sub on the group, a Telemetry settings command Pub on each published topic or Sub on the
group and each subscribed topic; the other RPCs need nothing beyond a proven caller.

Refusals travel in the response's status as the proxy answers them (gRPC status OK): a failed authentication is
UNAUTHORIZED (40100), a missing grant FORBIDDEN (40300); RocketMQ's proxy answers UNAUTHORIZED for both.

The date-time must be within ``authenticationDateTimeSkewMillis`` of the broker's clock read as UTC *or* as local
time (the official Python client writes local time with a literal Z): a header captured earlier stops working
once its date-time is that far away. A Telemetry stream is authenticated when it opens (its headers never change);
each settings command on it is authorized.
"""

from __future__ import annotations

import time

from broker.auth.gate import AuthGate, Refusal
from broker.auth.model import Action, Need, Resource, ResourceType
from broker.grpc_v2 import codes
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from remoting.acl_signature import (
    V2_AUTHORIZATION,
    V2_DATE_TIME,
    V2HeaderError,
    parse_v2_authorization,
    parse_v2_date_time,
    verify_v2,
)

PUB = frozenset({Action.PUB})
SUB = frozenset({Action.SUB})
PUB_SUB = frozenset({Action.PUB, Action.SUB})
CONSUMERS = (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER, pb.ClientType.PULL_CONSUMER)


def _topic(resource: pb.Resource) -> Resource:
    return Resource(ResourceType.TOPIC, resource.name)


def _group(resource: pb.Resource) -> Resource:
    return Resource(ResourceType.GROUP, resource.name)


def _sub(request) -> list[Need]:
    return [(_group(request.group), SUB), (_topic(request.topic), SUB)]


def _settings(command: spb.TelemetryCommand) -> list[Need]:
    if command.WhichOneof("command") != "settings":
        return []
    settings = command.settings
    out: list[Need] = []
    if settings.HasField("publishing"):
        out += [(_topic(t), PUB) for t in settings.publishing.topics]
    if settings.HasField("subscription"):
        out.append((_group(settings.subscription.group), SUB))
        out += [(_topic(e.topic), SUB) for e in settings.subscription.subscriptions]
    return out


def _send(request: spb.SendMessageRequest) -> list[Need]:
    topics = dict.fromkeys(m.topic.name for m in request.messages)
    return [(Resource(ResourceType.TOPIC, name), PUB) for name in topics] or [(Resource(ResourceType.TOPIC), PUB)]


TABLE = {
    spb.SendMessageRequest: _send,
    spb.EndTransactionRequest: lambda r: [(_topic(r.topic), PUB)],
    spb.ReceiveMessageRequest: lambda r: [(_group(r.group), SUB), (_topic(r.message_queue.topic), SUB)],
    spb.AckMessageRequest: _sub,
    spb.ForwardMessageToDeadLetterQueueRequest: _sub,
    spb.QueryAssignmentRequest: _sub,
    spb.ChangeInvisibleDurationRequest: lambda r: [(_group(r.group), SUB)],
    spb.QueryRouteRequest: lambda r: [(_topic(r.topic), PUB_SUB)],
    spb.HeartbeatRequest: lambda r: [(_group(r.group), SUB)] if r.client_type in CONSUMERS else [],
    spb.NotifyClientTerminationRequest: lambda r: [(_group(r.group), SUB)] if r.group.name else [],
    spb.TelemetryCommand: _settings,
}


def needs(request) -> list[Need]:
    """What a v2 request needs granted ([] for the RPCs RocketMQ does not authorize)."""
    rule = TABLE.get(type(request))
    return [] if rule is None else rule(request)


def _headers(context) -> tuple[str | None, str | None]:
    authorization = date_time = None
    for key, value in context.invocation_metadata() or ():
        if key == V2_AUTHORIZATION:
            authorization = value if isinstance(value, str) else None
        elif key == V2_DATE_TIME:
            date_time = value if isinstance(value, str) else None
    return authorization, date_time


class V2Auth:
    def __init__(self, gate: AuthGate, skew_ms: int) -> None:
        self.gate = gate
        self.skew_s = skew_ms / 1000.0
        self.wall_clock = time.time
        self._parsed = ("", 0.0)  # the last date-time and its epoch: a client repeats one for a whole second

    def _skew_problem(self, date_time: str) -> str | None:
        text, when = self._parsed
        if text != date_time:
            when = parse_v2_date_time(date_time)
            self._parsed = (date_time, when)
        now = self.wall_clock()
        off_s = abs(when - now)
        if off_s > self.skew_s:  # maybe local time with a Z (the Python client's): the local clock read as UTC
            off_s = min(off_s, abs(when - now - time.localtime(now).tm_gmtoff))
        if off_s <= self.skew_s:
            return None
        return (f"x-mq-date-time {date_time} is {off_s:.0f} s away from the broker's clock (more than "
                f"authenticationDateTimeSkewMillis={self.skew_s * 1000:.0f}): a replayed request or a wrong clock; "
                "set the client's clock")

    def check(self, request, context, peer: str, *, authenticate: bool = True) -> pb.Status | None:
        """None when ``request`` may be served, else the status to answer with. ``authenticate=False``: the
        stream's caller was proven already (later Telemetry commands): authorize only."""
        authorization, date_time = _headers(context)
        access_key = signature_hex = problem = None
        try:
            if authorization:
                access_key, signature_hex = parse_v2_authorization(authorization)
            if self.gate.authentication and authenticate:
                if not authorization:
                    problem = ("the authorization header is missing; give the client credentials (access key,"
                               " secret key)")
                elif not date_time:
                    problem = f"the {V2_DATE_TIME} header is missing"
                else:
                    problem = self._skew_problem(date_time)
        except V2HeaderError as exc:
            problem = str(exc)
        refusal = self.gate.check(
            peer, type(request).__name__.removesuffix("Request"), access_key,
            lambda password: verify_v2(password, date_time or "", signature_hex or ""),
            lambda: needs(request), problem, authenticate=authenticate)
        return None if refusal is None else status(refusal)


def status(refusal: Refusal) -> pb.Status:
    return codes.status(pb.Code.UNAUTHORIZED if refusal.authentication else pb.Code.FORBIDDEN, refusal.remark)
