"""What a consumer subscribes to (RocketMQ's MessageSelector): a tag expression (``*``, ``A || B``) or a SQL92
expression over the message's properties, evaluated by the broker (``enablePropertyFilter=true`` there).

Everywhere the SDK takes a subscription, a plain string is a tag expression and ``MessageSelector.by_sql(...)``
(or ``sql92=`` where offered) asks for SQL92.
"""

from __future__ import annotations

from dataclasses import dataclass

TAG = "TAG"
SQL92 = "SQL92"


@dataclass(frozen=True, slots=True)
class MessageSelector:
    type: str  # TAG or SQL92, RocketMQ's ExpressionType
    expression: str

    def __post_init__(self) -> None:
        if self.type not in (TAG, SQL92):
            raise ValueError(f"selector type {self.type!r} is not TAG or SQL92")
        if self.type == SQL92 and not self.expression.strip():
            raise ValueError("a SQL92 selector needs an expression, e.g. \"a > 5 AND TAGS IN ('x')\"")

    @classmethod
    def by_tag(cls, expression: str = "*") -> MessageSelector:
        return cls(TAG, expression or "*")

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        return cls(SQL92, expression)

    @property
    def is_tag(self) -> bool:
        return self.type == TAG


Selector = str | MessageSelector


def as_selector(subscription: Selector | None, sql92: str | None = None) -> MessageSelector:
    """A selector from what the caller gave: a tag string, a selector, or ``sql92=`` (which wins)."""
    if sql92 is not None:
        return MessageSelector.by_sql(sql92)
    if isinstance(subscription, MessageSelector):
        return subscription
    return MessageSelector.by_tag(subscription or "*")
