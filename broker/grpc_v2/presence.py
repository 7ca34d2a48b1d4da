"""RocketMQ 5 clients in the broker's own client table, so operators see them like remoting clients
(GET_CONSUMER_CONNECTION_LIST / mqctl consumerConnection, a group ONLINE in consumerProgress, GET_PRODUCER_CONNECTION_LIST).

RocketMQ's proxy does the same (``ClientActivity.registerConsumer``/``registerProducer``): each heartbeat and each
Settings on the Telemetry stream registers the client in the broker's ConsumerManager or ProducerManager with a
channel of its own, language = the ``x-mq-language`` header (a LanguageCode name; OTHER otherwise), version = the
header ``x-mq-client-version`` when it names an MQVersion, else the broker's own (the official clients send
"5.1.2", which names none, so it is pyrmq's ``CURRENT_VERSION``). Consumers: SIMPLE_CONSUMER is
CONSUME_ACTIVELY, PUSH_CONSUMER CONSUME_PASSIVELY, both CLUSTERING and CONSUME_FROM_LAST_OFFSET, subscribed to their
Settings' topics plus each topic's pop retry topic with ``*`` (RocketMQ's pop compensates the retry subscription).
Producers register under each topic they publish to (the proxy uses the topic as the producer group).

The channel's ``peer`` is the client's address. NotifyClientTermination and the client's expiry unregister it;
the client table's own 120 s expiry covers a client that vanished. NOTIFY_CONSUMER_IDS_CHANGED and the expiry's
close skip these channels (they are not remoting connections).
"""

from __future__ import annotations

import asyncio
import time

from broker.client_manager import Subscription
from broker.context import BrokerContext
from broker.grpc_v2.clients import V2Client
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pop.receipt import pop_retry_topic
from remoting.codes import CURRENT_VERSION, LanguageCode


OUTBOX_MAX = 1024  # checks waiting for one v2 client's Telemetry stream


class V2Channel:
    """A RocketMQ 5 client as a member of the broker's client table (hashable by identity, one per client id).

    ``invoke_oneway`` is how the transaction check service reaches a v2 producer: the CHECK_TRANSACTION_STATE
    waits in ``outbox`` (bounded) for one of the client's open Telemetry streams, which sends it as a
    RecoverOrphanedTransactionCommand; without an open stream it raises, so the service tries another producer."""

    __slots__ = ("client_id", "outbox", "peer", "streams")

    def __init__(self, client_id: str, peer: str) -> None:
        self.client_id = client_id
        self.peer = peer
        self.streams = 0  # open Telemetry streams that read the outbox
        self.outbox: asyncio.Queue = asyncio.Queue(maxsize=OUTBOX_MAX)

    def invoke_oneway(self, command) -> None:
        if self.streams <= 0:
            raise ConnectionError(f"v2 client {self.client_id} has no open Telemetry stream")
        self.outbox.put_nowait(command)  # QueueFull: the client is not reading; the next round asks again

    def __repr__(self) -> str:
        return f"V2Channel({self.client_id}@{self.peer})"


def language(header: str) -> str:
    return header if header in LanguageCode.__members__ else "OTHER"


def _subscriptions(group: str, settings: pb.Settings | None) -> list[Subscription]:
    if settings is None or settings.WhichOneof("pub_sub") != "subscription":
        return []
    now_ms = int(time.time() * 1000)
    out = []
    for entry in settings.subscription.subscriptions:
        topic = entry.topic.name
        kind = "SQL92" if entry.expression.type == pb.FilterType.SQL else "TAG"
        out.append(Subscription(topic, entry.expression.expression or "*", kind, now_ms))
        out.append(Subscription(pop_retry_topic(group, topic), "*", "TAG", now_ms))
    return out


def publish(ctx: BrokerContext, client: V2Client, channel: V2Channel, lang: str) -> None:
    """Register (or refresh) the client under its group or its topics."""
    kind = client.client_type
    if kind in (pb.ClientType.SIMPLE_CONSUMER, pb.ClientType.PUSH_CONSUMER) and client.group:
        ctx.clients.register_consumer(
            channel, client.group, client.client_id, language=language(lang), version=CURRENT_VERSION,
            consume_type="CONSUME_ACTIVELY" if kind == pb.ClientType.SIMPLE_CONSUMER else "CONSUME_PASSIVELY",
            message_model="CLUSTERING", consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscriptions=_subscriptions(client.group, client.settings),
        )
    elif kind == pb.ClientType.PRODUCER and client.settings is not None:
        for topic in client.settings.publishing.topics:
            ctx.clients.register_producer(channel, topic.name, client.client_id, language=language(lang),
                                          version=CURRENT_VERSION)


def withdraw(ctx: BrokerContext, channel: V2Channel) -> None:
    ctx.clients.unregister(channel)
