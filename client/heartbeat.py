"""Who this client is to the brokers: its clientID, HEART_BEAT (34) and UNREGISTER_CLIENT (35).

The clientID follows RocketMQ (spec §6.3): ``<clientIP>@<instanceName>``, where an unnamed instance is
``<pid>#<nanoseconds>`` (Java's ``changeInstanceNameToPID`` plus ``System.nanoTime()``), so two clients of one
process never share an id and brokers tell them apart in GET_CONSUMER_LIST_BY_GROUP.

HeartbeatData (spec §5.2) is written with RocketMQ's field names in fastjson's alphabetical order::

    {"clientID":"10.0.0.5@4242#81234","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",
     "consumeType":"CONSUME_PASSIVELY","groupName":"G","messageModel":"CLUSTERING","subscriptionDataSet":[
     {"classFilterMode":false,"codeSet":[65,67],"expressionType":"TAG","subString":"A || C","subVersion":1700000000000,
      "tagsSet":["A","C"],"topic":"T"}],"unitMode":false}],"producerDataSet":[{"groupName":"P"}]}

``codeSet`` holds Java's ``String.hashCode`` of each tag (``remoting.message_codec.java_string_hash``), the code
the broker compares with the consume queue's tags code. The functions building bodies are pure.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from client.message import local_ip
from client.rpc import ClientRemoting, best_effort
from client.selector import Selector, as_selector
from remoting import fastjson
from remoting.codes import RequestCode
from remoting.message_codec import TagFilter, java_string_hash

_last_instance_ns = 0


def new_client_id(instance_name: str | None = None, ip: str | None = None) -> str:
    """``<ip>@<instanceName>``; an unnamed instance gets ``<pid>#<ns>``, unique within the process."""
    global _last_instance_ns
    if not instance_name or instance_name == "DEFAULT":
        now = max(time.monotonic_ns(), _last_instance_ns + 1)
        _last_instance_ns = now
        instance_name = f"{os.getpid()}#{now}"
    return f"{ip or local_ip()}@{instance_name}"


def subscription_data(topic: str, expression: Selector, sub_version: int) -> dict[str, Any]:
    """RocketMQ's SubscriptionData for a tag expression (``*`` or ``A || B``; FilterAPI.buildSubscriptionData) or
    a SQL92 selector (FilterAPI.build: no tags, the expression as subString)."""
    selector = as_selector(expression)
    if not selector.is_tag:
        return {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": selector.type,
            "subString": selector.expression,
            "subVersion": sub_version,
            "tagsSet": [],
            "topic": topic,
        }
    tags = TagFilter(selector.expression)
    ordered = sorted(tags.tags)
    return {
        "classFilterMode": False,
        "codeSet": [java_string_hash(t) for t in ordered],
        "expressionType": "TAG",
        "subString": "*" if tags.match_all else tags.expression,
        "subVersion": sub_version,
        "tagsSet": ordered,
        "topic": topic,
    }


def consumer_data(
    group: str,
    *,
    consume_type: str,
    message_model: str,
    consume_from_where: str,
    subscriptions: Iterable[dict[str, Any]],
) -> dict[str, Any]:
    """RocketMQ's ConsumerData. ``consume_type``: CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)."""
    return {
        "consumeFromWhere": consume_from_where,
        "consumeType": consume_type,
        "groupName": group,
        "messageModel": message_model,
        "subscriptionDataSet": list(subscriptions),
        "unitMode": False,
    }


def heartbeat_body(
    client_id: str, *, producer_groups: Iterable[str] = (), consumers: Iterable[Mapping[str, Any]] = ()
) -> bytes:
    return fastjson.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": list(consumers),
            "producerDataSet": [{"groupName": g} for g in producer_groups],
        }
    )


def consumer_heartbeat_body(
    client_id: str,
    group: str,
    subscriptions: Iterable[tuple[str, Selector]],
    sub_version: int,
    *,
    consume_type: str,
    message_model: str,
    consume_from_where: str,
) -> bytes:
    """HeartbeatData of a client that is one consumer of ``group``, subscribed to each (topic, tag expression)."""
    subs = [subscription_data(topic, expression, sub_version) for topic, expression in subscriptions]
    consumer = consumer_data(
        group,
        consume_type=consume_type,
        message_model=message_model,
        consume_from_where=consume_from_where,
        subscriptions=subs,
    )
    return heartbeat_body(client_id, consumers=[consumer])


async def send_heartbeats(remoting: ClientRemoting, addrs: Iterable[str], body: bytes, timeout_s: float) -> int:
    """HEART_BEAT to every address at once; returns how many answered SUCCESS (failures are logged)."""
    results = await asyncio.gather(
        *(best_effort(remoting.call(addr, RequestCode.HEART_BEAT, None, body, timeout_s=timeout_s)) for addr in addrs)
    )
    return sum(results)


async def unregister(
    remoting: ClientRemoting,
    addrs: Iterable[str],
    client_id: str,
    *,
    producer_group: str | None = None,
    consumer_group: str | None = None,
    timeout_s: float,
) -> None:
    """UNREGISTER_CLIENT to every address (best effort: a stopping client does not wait for a dead broker)."""
    ext = {"clientID": client_id}
    if producer_group:
        ext["producerGroup"] = producer_group
    if consumer_group:
        ext["consumerGroup"] = consumer_group
    await asyncio.gather(
        *(best_effort(remoting.call(addr, RequestCode.UNREGISTER_CLIENT, ext, timeout_s=timeout_s)) for addr in addrs)
    )


async def check_client_config(
    remoting: ClientRemoting,
    addr: str,
    client_id: str,
    group: str,
    topic: str,
    selector: Selector,
    sub_version: int,
    timeout_s: float,
) -> None:
    """CHECK_CLIENT_CONFIG (46), as Java's client sends it before using a SQL92 subscription: raises
    ``BrokerError`` with the broker's remark (SQL92 off on that broker, or where the expression is wrong)."""
    body = fastjson.dumps(
        {"clientId": client_id, "group": group, "subscriptionData": subscription_data(topic, selector, sub_version)}
    )
    await remoting.call(addr, RequestCode.CHECK_CLIENT_CONFIG, None, body, timeout_s=timeout_s,
                        what=f"CHECK_CLIENT_CONFIG of {topic} ({as_selector(selector).expression!r})")
