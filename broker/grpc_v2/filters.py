"""SQL92 filters on the v2 endpoint (``FilterExpression{type: SQL}``): the same compiled filters and the same
``enablePropertyFilter`` switch as the remoting pull, answered with ILLEGAL_FILTER_EXPRESSION and the position of
the error when an expression does not compile."""

from __future__ import annotations

from broker.context import BrokerContext
from broker.filter.consumer_filters import PropertyFilter
from broker.filter.sql92 import SqlFilterError
from broker.grpc_v2 import codes
from broker.grpc_v2.pb import definition_pb2 as pb


def sql_filter(ctx: BrokerContext, group: str, topic: str, expression: str) -> PropertyFilter | pb.Status:
    """The compiled filter of ``group`` on ``topic``, or the status that refuses it."""
    if not ctx.settings.broker.enable_property_filter:
        return codes.status(pb.Code.ILLEGAL_FILTER_EXPRESSION, f"SQL92 filters are off on broker {ctx.broker_name};"
                            " set enablePropertyFilter=true there, or filter by tag")
    try:
        return ctx.filters.get(group, topic, expression)
    except SqlFilterError as exc:
        return codes.status(pb.Code.ILLEGAL_FILTER_EXPRESSION, str(exc))


def settings_refusal(ctx: BrokerContext, settings: pb.Settings) -> pb.Status | None:
    """A consumer's Telemetry settings with a SQL subscription this broker cannot serve: the first refusal."""
    if settings.WhichOneof("pub_sub") != "subscription":
        return None
    group = settings.subscription.group.name
    for entry in settings.subscription.subscriptions:
        if entry.expression.type == pb.FilterType.SQL:
            found = sql_filter(ctx, group, entry.topic.name, entry.expression.expression)
            if isinstance(found, pb.Status):
                return found
    return None
