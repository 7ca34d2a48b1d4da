"""Where a consumer starts reading a queue that has no committed offset (RocketMQ's computePullFromWhere).

Why a module of its own: the rule is a small policy with three broker answers behind it, and it is easy to get
wrong in ways that lose or repeat messages; kept apart from ``push_consumer.py``'s rebalance and pull loops it
can be read (and tested against a real broker) on its own.

- a committed offset wins (``offsets.read``: the broker's, or the local file when broadcasting);
- a retry topic (``%RETRY%<group>``) always starts at 0: what is there was sent back for this group;
- otherwise ``ConsumeFromWhere``: the queue's max offset (GET_MAX_OFFSET 30), 0, or the first message stored at or
  after ``consume_timestamp_ms`` (SEARCH_OFFSET_BY_TIMESTAMP 29), asked of any node of the queue's broker group.
"""

from __future__ import annotations

import enum

from client.errors import BrokerError, MQClientError
from client.message import MessageQueue
from client.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from client.route_cache import RouteCache
from client.rpc import ClientRemoting
from remoting.codes import RequestCode
from remoting.headers import parse_int
from remoting.message_codec import RETRY_GROUP_TOPIC_PREFIX


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


async def start_offset(
    offsets: RemoteBrokerOffsetStore | LocalFileOffsetStore,
    routes: RouteCache,
    remoting: ClientRemoting,
    mq: MessageQueue,
    where: ConsumeFromWhere,
    timestamp_ms: int,
    timeout_s: float,
) -> int:
    """The offset to pull ``mq`` from first. Raises ``MQClientError`` when the broker cannot say (retry later)."""
    stored = await offsets.read(mq)
    if stored >= 0:
        return stored
    if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    ext = {"topic": mq.topic, "queueId": str(mq.queue_id)}
    if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        ext["timestamp"] = str(timestamp_ms)
        return await queue_offset(routes, remoting, mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext, timeout_s)
    return await queue_offset(routes, remoting, mq, RequestCode.GET_MAX_OFFSET, ext, timeout_s)


async def queue_offset(routes: RouteCache, remoting: ClientRemoting, mq: MessageQueue, code: int,
                       ext: dict[str, str], timeout_s: float) -> int:
    """GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP on a node of the queue's group: the ``offset`` header."""
    addr = routes.find_any_address(mq.broker_name)
    if addr is None:
        raise MQClientError(f"no address for broker group {mq.broker_name}", hint="check the topic route")
    resp = await remoting.call(addr, code, ext, timeout_s=timeout_s)
    try:
        return parse_int((resp.ext or {})["offset"], what="offset")
    except (KeyError, ValueError):
        raise BrokerError(resp.code, "answer without a numeric offset header", addr, request=f"{code}",
                          request_code=code) from None
