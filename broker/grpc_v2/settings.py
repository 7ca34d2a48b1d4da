"""The Settings a broker answers on the Telemetry stream (RocketMQ's proxy ``GrpcClientSettingsManager``).

The reply is the client's own Settings plus what the server decides. The official Python client copies
``publishing.max_body_size`` blindly (a reply without it makes every later send fail with "max size=0"), and a
PushConsumer waits for this reply before it starts. Producers: max_body_size = maxMessageSize,
validate_message_type, an exponential send backoff (3 attempts, 10 ms doubling to 1 s). Consumers:
receive_batch_size 32, long_polling_timeout 20 s unless the client set one, fifo = the group's
consumeMessageOrderly (its PushConsumer then consumes each message group in order, retrying locally), and the redelivery backoff
RocketMQ 5 uses by default (customized 1 s, 5 s, 10 s, 30 s, 1 m, ... 2 h) with max_attempts = the group's
retryMaxTimes + 1; metric off.
"""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration

from broker.context import BrokerContext
from broker.grpc_v2.pb import definition_pb2 as pb

RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
REDELIVERY_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


def _ms(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def answer(ctx: BrokerContext, client: pb.Settings) -> pb.Settings:
    out = pb.Settings()
    out.CopyFrom(client)
    out.metric.CopyFrom(pb.Metric(on=False))
    if client.client_type == pb.ClientType.PRODUCER or client.WhichOneof("pub_sub") == "publishing":
        out.publishing.max_body_size = ctx.max_message_size
        out.publishing.validate_message_type = True
        out.backoff_policy.CopyFrom(pb.RetryPolicy(
            max_attempts=3,
            exponential_backoff=pb.ExponentialBackoff(initial=_ms(10), max=_ms(1000), multiplier=2.0),
        ))
        return out
    sub = out.subscription
    group = ctx.groups.get(sub.group.name) if sub.HasField("group") else None
    retry_max = group.retry_max_times if group is not None else ctx.settings.broker.max_reconsume_times
    sub.receive_batch_size = RECEIVE_BATCH_SIZE
    if not sub.HasField("long_polling_timeout") or sub.long_polling_timeout.ToMilliseconds() <= 0:
        sub.long_polling_timeout.CopyFrom(_ms(LONG_POLLING_TIMEOUT_S * 1000))
    sub.fifo = group is not None and group.consume_message_orderly
    out.backoff_policy.CopyFrom(pb.RetryPolicy(
        max_attempts=retry_max + 1,
        customized_backoff=pb.CustomizedBackoff(next=[_ms(s * 1000) for s in REDELIVERY_BACKOFF_S]),
    ))
    return out
