"""pyrmq client SDK: Producer, PushConsumer, PullConsumer, AdminClient (asyncio, RocketMQ remoting).

``AdminClient`` is imported on first use: producers and consumers do not load the admin tooling.
"""

from typing import Any

from client.consume_service import ConsumeStatus
from client.errors import (
    BrokerError,
    BrokerNotFoundError,
    BrokerUnreachableError,
    ClientStateError,
    MQClientError,
    NoNameserverError,
    NoRouteError,
    ProducerClosedError,
    RequestTimeout,
)
from client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from client.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from client.producer import Producer
from client.pull_api import PullResult, PullStatus
from client.pull_consumer import PullConsumer
from client.rpc import tls_context
from client.push_consumer import ConsumeFromWhere, MessageModel, PushConsumer
from client.selector import MessageSelector

__all__ = [
    "AdminClient",
    "BrokerError",
    "BrokerNotFoundError",
    "BrokerUnreachableError",
    "ClientStateError",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "LocalFileOffsetStore",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "NoNameserverError",
    "NoRouteError",
    "Producer",
    "ProducerClosedError",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "RemoteBrokerOffsetStore",
    "RequestTimeout",
    "SendResult",
    "SendStatus",
    "tls_context",
]


def __getattr__(name: str) -> Any:
    if name == "AdminClient":
        from client.admin import AdminClient

        return AdminClient
    raise AttributeError(f"module 'client' has no attribute {name!r}")
