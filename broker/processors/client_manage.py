"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), CHECK_CLIENT_CONFIG (46), and the
broker's call to its clients, NOTIFY_CONSUMER_IDS_CHANGED (40) (RocketMQ ClientManageProcessor,
ConsumerManageProcessor#getConsumerListByGroup, Broker2Client; spec remoting.md §2.3, §2.7, §5.2).

HEART_BEAT carries HeartbeatData JSON and no header. For each consumer group it makes sure the subscription
group exists (auto-created when ``autoCreateSubscriptionGroup``) and, on a master, its ``%RETRY%<group>`` topic
(1 queue, perm 6, as RocketMQ creates it here), then registers the connection with its subscriptions in
``broker.client_manager``; producer groups are registered too. The connection's ``attrs`` keep the client's
``clientId``, ``language`` and ``version``. The answer's ``version`` is the broker's (the client stores it).
A SQL92 subscription is compiled into ``ctx.filters`` (RocketMQ's ConsumerFilterManager); one that does not
compile refuses the whole heartbeat (23, the remark names group, topic and the error's position), so nothing of it
is half registered.

CHECK_CLIENT_CONFIG (what Java's consumers send before using SQL92): SUCCESS for tags and for SQL92 that compiles
on a broker with ``enablePropertyFilter=true``; 1 with "set enablePropertyFilter=true" while it is off or for any
other filter type, 23 with the position for a bad expression, as RocketMQ answers.

When a group's membership changes (a connection joined, unregistered, closed or went silent), every remaining
connection of the group gets NOTIFY_CONSUMER_IDS_CHANGED (oneway, header ``consumerGroup``) unless the group's
``notifyConsumerIdsChangedEnable`` is off, and rebalances at once instead of within 20 s.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from broker.client_manager import Subscription
from broker.context import BrokerContext
from broker.filter.consumer_filters import SQL92, is_tag_type
from broker.filter.sql92 import SqlFilterError
from broker.processors import validate
from remoting import fastjson
from remoting.codes import LanguageCode, RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields, NumberError, parse_int

log = logging.getLogger(__name__)

MAX_CONSUMER_GROUPS_PER_HEARTBEAT = 256
MAX_PRODUCER_GROUPS_PER_HEARTBEAT = 256
_DECIMAL = re.compile(r"-?[0-9]{1,19}\Z", re.ASCII)


class BodyError(ValueError):
    """A HeartbeatData (or CHECK_CLIENT_CONFIG) body that does not have RocketMQ's shape."""


def _obj(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise BodyError(f"{what} is a {type(value).__name__}, not a JSON object")
    return value


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyError(f"{what} is a {type(value).__name__}, not a JSON array")
    return value


def _text(value: Any, what: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise BodyError(f"{what} is a {type(value).__name__}, not a string")
    return value


def _int(value: Any, what: str) -> int:
    """A long given as a JSON number or as its decimal text (the C++ client sends ``"subVersion":"1795563103827"``)."""
    if value is None:
        return 0
    try:
        return parse_int(value, what=what)
    except NumberError as exc:
        raise BodyError(str(exc)) from None


# Java's enum ordinals, which the C++ client sends instead of the names (CLIENT_NOTES.md).
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
_CONSUME_FROM = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def _enum(value: Any, names: tuple[str, ...], what: str) -> str:
    """An enum field as its name, whether it came as the name (Java, Go) or as the ordinal (C++)."""
    if value is None:
        return ""
    if isinstance(value, str) and not _DECIMAL.match(value):
        return value  # a name (an unknown one is kept as sent)
    index = _int(value, what)
    if not 0 <= index < len(names):
        raise BodyError(f"{what} is {value!r}, not one of {', '.join(names)} (or their numbers 0..{len(names) - 1})")
    return names[index]


def parse_subscription(raw: Any, what: str) -> Subscription:
    sub = _obj(raw, what)
    topic = _text(sub.get("topic"), f"{what}.topic")
    if not topic:
        raise BodyError(f"{what}.topic is missing")
    expression = _text(sub.get("subString"), f"{what}.subString", "*") or "*"
    return Subscription(
        topic=topic,
        sub_string=expression,
        expression_type=_text(sub.get("expressionType"), f"{what}.expressionType", "TAG") or "TAG",
        sub_version=_int(sub.get("subVersion"), f"{what}.subVersion"),
        class_filter_mode=bool(sub.get("classFilterMode", False)),
    )


def _json_object(body: bytes) -> dict:
    try:
        data = fastjson.loads(body)
    except (fastjson.JsonBodyError, ValueError) as exc:
        raise BodyError(f"the body is not JSON ({exc})") from None
    return _obj(data, "the body")


def _heartbeat(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    def refuse(code: int, remark: str) -> RemotingCommand:
        return response_to(request, code, remark)

    try:
        data = _json_object(request.body_bytes())
        client_id = _text(data.get("clientID"), "clientID")
        consumers = [_obj(c, "consumerDataSet[]") for c in _list(data.get("consumerDataSet"), "consumerDataSet")]
        producers = [_obj(p, "producerDataSet[]") for p in _list(data.get("producerDataSet"), "producerDataSet")]
        if len(consumers) > MAX_CONSUMER_GROUPS_PER_HEARTBEAT or len(producers) > MAX_PRODUCER_GROUPS_PER_HEARTBEAT:
            raise BodyError(
                f"{len(consumers)} consumer and {len(producers)} producer groups in one heartbeat; the limit is"
                f" {MAX_CONSUMER_GROUPS_PER_HEARTBEAT} each"
            )
        parsed = []
        for i, consumer in enumerate(consumers):
            what = f"consumerDataSet[{i}]"
            subs = [
                parse_subscription(s, f"{what}.subscriptionDataSet[{j}]")
                for j, s in enumerate(_list(consumer.get("subscriptionDataSet"), f"{what}.subscriptionDataSet"))
            ]
            enums = (
                _enum(consumer.get("consumeType"), _CONSUME_TYPES, f"{what}.consumeType"),
                _enum(consumer.get("messageModel"), _MESSAGE_MODELS, f"{what}.messageModel"),
                _enum(consumer.get("consumeFromWhere"), _CONSUME_FROM, f"{what}.consumeFromWhere"),
            )
            parsed.append((_text(consumer.get("groupName"), f"{what}.groupName"), enums, subs))
        producer_groups = [_text(p.get("groupName"), "producerDataSet[].groupName") for p in producers]
    except BodyError as exc:
        return refuse(ResponseCode.INVALID_PARAMETER, f"HEART_BEAT body is not HeartbeatData JSON: {exc}")
    if not client_id:
        return refuse(ResponseCode.INVALID_PARAMETER, "HEART_BEAT without clientID; set the client id")
    for group in [g for g, _, _ in parsed] + producer_groups:
        bad = validate.group_name(group)
        if bad:
            return refuse(bad.code, bad.remark)
    for group_name, _, subs in parsed:
        for sub in subs:
            refusal = _sql92_refusal(ctx, group_name, sub, check=False)
            if refusal is not None:
                return refuse(refusal[0], f"group {group_name}, topic {sub.topic}: {refusal[1]}")

    language = _language_name(request.language)
    conn.attrs["clientId"] = client_id
    conn.attrs["language"] = language
    conn.attrs["version"] = request.version
    topics_created = groups_created = False
    for group_name, (consume_type, message_model, consume_from_where), subs in parsed:
        group = ctx.groups.get(group_name)
        if group is None:
            group = ctx.groups.find_or_create(group_name)
            groups_created |= group is not None
        if group is not None and not ctx.is_slave:
            _, created = ctx.topics.create_retry_topic(group_name, group.retry_queue_nums)
            topics_created |= created
        ctx.clients.register_consumer(
            conn,
            group_name,
            client_id,
            language=language,
            version=request.version,
            consume_type=consume_type,
            message_model=message_model,
            consume_from_where=consume_from_where,
            subscriptions=subs,
        )
    for group_name in producer_groups:
        ctx.clients.register_producer(conn, group_name, client_id, language=language, version=request.version)
    if groups_created:
        ctx.groups_changed()
    if topics_created:
        ctx.retry_topics_changed()
    return response_to(request, ResponseCode.SUCCESS)


def _language_name(language: int) -> str:
    try:
        return LanguageCode(language).name
    except ValueError:
        return LanguageCode.OTHER.name


def _unregister(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    f = Fields(request.ext, "UNREGISTER_CLIENT")
    f.req_str("clientID")  # required, as in RocketMQ; the connection itself says who leaves (by channel)
    consumer_group = f.str("consumerGroup", "") or ""
    producer_group = f.str("producerGroup", "") or ""
    ctx.clients.unregister(conn, consumer_group=consumer_group, producer_group=producer_group)
    return response_to(request, ResponseCode.SUCCESS)


def _consumer_list(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    group = Fields(request.ext, "GET_CONSUMER_LIST_BY_GROUP").req_str("consumerGroup")
    ids = ctx.clients.consumer_ids(group)
    if not ids:
        # RocketMQ's exact text and code: clients log it and ask again at their next rebalance, which is right (a
        # consumer may connect meanwhile), so 1 stays.
        return response_to(request, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return response_to(request, ResponseCode.SUCCESS, body=fastjson.dumps({"consumerIdList": ids}))


def _check_client_config(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    try:
        data = _json_object(request.body_bytes())
        raw_sub = data.get("subscriptionData")
        sub = parse_subscription(raw_sub, "subscriptionData") if raw_sub is not None else None
        group = _text(data.get("group"), "group")
    except BodyError as exc:
        return response_to(request, ResponseCode.INVALID_PARAMETER, f"CHECK_CLIENT_CONFIG body is not valid: {exc}")
    if sub is not None and sub.class_filter_mode:
        return response_to(request, ResponseCode.SYSTEM_ERROR, "Not support class filter anymore; subscribe by tag"
                           " or SQL92")
    refusal = _sql92_refusal(ctx, group, sub, check=True) if sub is not None else None
    if refusal is not None:
        return response_to(request, *refusal)
    tags = sub.tag_filter if sub is not None and is_tag_type(sub.expression_type) else None
    if tags is not None and not tags.match_all and not tags.tags:
        return response_to(
            request,
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"subscription {sub.sub_string!r} names no tag; use '*' or 'tagA || tagB'",
        )
    return response_to(request, ResponseCode.SUCCESS)


def _sql92_refusal(ctx: BrokerContext, group: str, sub: Subscription, *, check: bool) -> tuple[int, str] | None:
    """(code, remark) when ``sub`` is a filter this broker refuses: SQL92 that does not compile (the remark says
    where) and, for CHECK_CLIENT_CONFIG (``check``), a type other than TAG and SQL92 or SQL92 while
    ``enablePropertyFilter`` is off (a heartbeat registers those, as RocketMQ's does, and the pull refuses).
    RocketMQ's codes: 1 for an unsupported filter (its clients raise any code as "maybe you use SQL92"), 23 for a
    bad expression."""
    kind = sub.expression_type
    if is_tag_type(kind) or (kind != SQL92 and not check):
        return None
    if kind != SQL92:
        return ResponseCode.SYSTEM_ERROR, (f"The broker does not support consumer to filter message by {kind};"
                                           " use TAG or SQL92")
    if check and not ctx.settings.broker.enable_property_filter:
        return ResponseCode.SYSTEM_ERROR, (f"The broker does not support consumer to filter message by SQL92; set"
                                           f" enablePropertyFilter=true on broker {ctx.broker_name}")
    try:
        ctx.filters.get(group, sub.topic, sub.sub_string)
    except SqlFilterError as exc:
        return ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)
    return None


def _notify_ids_changed(ctx: BrokerContext, group: str, conns: list) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED to every remaining connection of ``group`` (oneway, nothing to wait for)."""
    if not conns:
        return
    config = ctx.groups.get(group)
    if config is not None and not config.notify_consumer_ids_changed_enable:
        return
    for conn in conns:
        if not isinstance(conn, Connection) or not conn.is_open:
            continue
        try:
            conn.invoke_oneway(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext={"consumerGroup": group}))
        except RemotingError as exc:
            log.info("could not notify %s of group %s: %s", conn.peer, group, exc)


def _close_expired(conn) -> None:
    if isinstance(conn, Connection):
        conn.close("no heartbeat for 120 s")


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.HEART_BEAT, lambda conn, req: _heartbeat(ctx, conn, req))
    server.register(RequestCode.UNREGISTER_CLIENT, lambda conn, req: _unregister(ctx, conn, req))
    server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, lambda conn, req: _consumer_list(ctx, conn, req))
    server.register(RequestCode.CHECK_CLIENT_CONFIG, lambda conn, req: _check_client_config(ctx, conn, req))
    server.on_close(ctx.clients.connection_closed)
    ctx.clients.on_group_changed.append(lambda group, conns: _notify_ids_changed(ctx, group, conns))
    ctx.clients.on_expired.append(_close_expired)
