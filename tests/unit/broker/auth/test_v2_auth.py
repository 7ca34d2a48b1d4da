"""RocketMQ 5's gRPC signature (``authorization`` and ``x-mq-date-time``) and what each v2 request needs, as
RocketMQ's DefaultAuthenticationContextBuilder / DefaultAuthorizationContextBuilder read them. Pure."""

from __future__ import annotations

import hmac

import pytest

from broker.auth.model import Action, Resource, ResourceType
from broker.grpc_v2.auth import needs
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from remoting.acl_signature import (
    V2HeaderError,
    parse_v2_authorization,
    parse_v2_date_time,
    v2_metadata,
    verify_v2,
)

PUB, SUB = frozenset({Action.PUB}), frozenset({Action.SUB})


def topic(name: str) -> Resource:
    return Resource(ResourceType.TOPIC, name)


def group(name: str) -> Resource:
    return Resource(ResourceType.GROUP, name)


def test_the_headers_a_client_sends_parse_back_and_verify_with_the_secret_only():
    headers = dict(v2_metadata("alice", "alice-sk", epoch_s=1_795_000_000))
    assert headers["x-mq-date-time"] == "20261118T110640Z"
    ak, sig = parse_v2_authorization(headers["authorization"])
    assert ak == "alice"
    assert sig == hmac.new(b"alice-sk", b"20261118T110640Z", "sha1").hexdigest()
    assert verify_v2("alice-sk", "20261118T110640Z", sig)
    assert not verify_v2("other-sk", "20261118T110640Z", sig)
    assert not verify_v2("alice-sk", "20261118T110641Z", sig), "the signature covers the date-time"
    assert parse_v2_date_time("20261118T110640Z") == 1_795_000_000


def test_rocketmq_credential_scope_is_cut_at_the_slash():
    sig = "0" * 40
    assert parse_v2_authorization(f"MQv2-HMAC-SHA1 Credential=ak/2026/x, SignedHeaders=x-mq-date-time, "
                                  f"Signature={sig}") == ("ak", sig)


@pytest.mark.parametrize("header, says", [
    ("Bearer abc", "does not start with MQv2-HMAC-SHA1"),
    ("MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40, "no Credential"),
    ("MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time", "no Signature"),
    ("MQv2-HMAC-SHA1 Credential=ak, Signature=zz", "not 40 hex digits"),
    ("MQv2-HMAC-SHA1 Credential", "Name=value"),
    ("MQv2-HMAC-SHA1 Credential=" + "k" * 2000 + ", Signature=" + "0" * 40, "longer than 1024"),
])
def test_malformed_authorization_headers_say_which_part(header, says):
    with pytest.raises(V2HeaderError, match=says):
        parse_v2_authorization(header)


@pytest.mark.parametrize("text", ["2026-11-17T04:13Z", "20261317T041320Z", "20261117T041320", "２０261117T041320Z",
                                  "20261117T996060Z", ""])
def test_malformed_date_times_are_refused(text):
    with pytest.raises(V2HeaderError):
        parse_v2_date_time(text)


def test_each_v2_request_needs_what_rocketmq_asks():
    t, g = pb.Resource(name="Orders"), pb.Resource(name="g1")
    send = spb.SendMessageRequest(messages=[pb.Message(topic=t), pb.Message(topic=pb.Resource(name="Other")),
                                            pb.Message(topic=t)])
    assert needs(send) == [(topic("Orders"), PUB), (topic("Other"), PUB)]
    receive = spb.ReceiveMessageRequest(group=g, message_queue=pb.MessageQueue(topic=t))
    assert needs(receive) == [(group("g1"), SUB), (topic("Orders"), SUB)]
    assert needs(spb.AckMessageRequest(group=g, topic=t)) == [(group("g1"), SUB), (topic("Orders"), SUB)]
    assert needs(spb.ChangeInvisibleDurationRequest(group=g, topic=t)) == [(group("g1"), SUB)]
    assert needs(spb.QueryRouteRequest(topic=t)) == [(topic("Orders"), frozenset({Action.PUB, Action.SUB}))]
    assert needs(spb.EndTransactionRequest(topic=t)) == [(topic("Orders"), PUB)]
    assert needs(spb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER)) == []
    assert needs(spb.HeartbeatRequest(client_type=pb.ClientType.SIMPLE_CONSUMER, group=g)) == [(group("g1"), SUB)]
    assert needs(spb.NotifyClientTerminationRequest()) == []
    settings = spb.TelemetryCommand(settings=pb.Settings(subscription=pb.Subscription(
        group=g, subscriptions=[pb.SubscriptionEntry(topic=t)])))
    assert needs(settings) == [(group("g1"), SUB), (topic("Orders"), SUB)]
    publishing = spb.TelemetryCommand(settings=pb.Settings(publishing=pb.Publishing(topics=[t])))
    assert needs(publishing) == [(topic("Orders"), PUB)]
    assert needs(spb.RecallMessageRequest(topic=t)) == []


class _Context:
    def __init__(self, metadata) -> None:
        self.metadata = tuple(metadata)

    def invocation_metadata(self):
        return self.metadata


def _v2_auth(now_s: float):
    from broker.auth.gate import AuthGate
    from broker.auth.model import User
    from broker.auth.store import AuthStore
    from broker.grpc_v2.auth import V2Auth

    store = AuthStore(None)
    store.users["alice"] = User("alice", "alice-sk")
    auth = V2Auth(AuthGate(store, authentication=True, authorization=False), skew_ms=300_000)
    auth.wall_clock = lambda: now_s
    return auth


def test_a_date_time_within_the_skew_of_utc_or_of_local_time_passes_and_a_replayed_one_does_not(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Shanghai")  # UTC+8, as a client there writes its local time with a Z
    time.tzset()
    try:
        now = 1_795_000_000.0
        auth = _v2_auth(now)
        request = spb.QueryRouteRequest(topic=pb.Resource(name="t"))
        local = time.strftime("%Y%m%dT%H%M%SZ", time.localtime(now - 30))
        for date_time in (local, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + 30))):
            assert auth.check(request, _Context(v2_metadata("alice", "alice-sk", date_time=date_time)),
                              "10.0.0.1:5") is None
        replayed = auth.check(request, _Context(v2_metadata("alice", "alice-sk", epoch_s=now - 600)), "10.0.0.1:5")
        assert replayed.code == pb.Code.UNAUTHORIZED and "600 s away from the broker's clock" in replayed.message
        off_by_hours = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + 3 * 3600))  # neither clock
        refused = auth.check(request, _Context(v2_metadata("alice", "alice-sk", date_time=off_by_hours)), "10.0.0.1:5")
        assert refused.code == pb.Code.UNAUTHORIZED
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_an_address_that_keeps_failing_is_refused_unread_and_others_are_not():
    auth = _v2_auth(1_795_000_000.0)
    request = spb.QueryRouteRequest(topic=pb.Resource(name="t"))
    bad = _Context(v2_metadata("alice", "wrong", epoch_s=1_795_000_000.0))
    good = _Context(v2_metadata("alice", "alice-sk", epoch_s=1_795_000_000.0))
    answers = [auth.check(request, bad, "10.0.0.9:1") for _ in range(100)]
    assert all(a.code == pb.Code.UNAUTHORIZED for a in answers)
    assert sum("too many failed authentications from 10.0.0.9" in a.message for a in answers) >= 75
    assert "too many failed" in auth.check(request, good, "10.0.0.9:2").message, "a right key from there waits too"
    assert auth.check(request, good, "10.0.0.8:1") is None
