"""SQL92 subscriptions on the broker (RocketMQ's ConsumerFilterManager + ExpressionMessageFilter): each group's
compiled filter per topic, and the check a stored record passes before it is delivered.

A filter is compiled once per (group, topic, expression) and kept in a bounded table (least recently used goes
first; a heartbeat or a pull compiles it again). A refused expression is remembered too, so a client that keeps
pulling with one costs a dictionary lookup, not a parse. ``PropertyFilter.match_record`` reads only the record's
properties, in place in the commitlog mapping: a message that does not match never has its body copied nor a
message object built (TAGS is one of the properties, as in RocketMQ).
"""

from __future__ import annotations

import struct
from collections import OrderedDict

from broker.filter.sql92 import SqlFilter, SqlFilterError, compile_filter

SQL92 = "SQL92"
TAG = "TAG"
MAX_FILTERS = 4096

_BODY_LEN = struct.Struct(">i").unpack_from
_PROPS_LEN = struct.Struct(">h").unpack_from
_BODY_AT = 88  # the body's length is the i32 at 84, the body follows


def is_tag_type(expression_type: str | None) -> bool:
    """RocketMQ's ExpressionType.isTagType: none, empty or TAG."""
    return not expression_type or expression_type == TAG


def record_properties(buf, start: int, end: int) -> dict[str, str] | None:
    """The properties of the stored record at ``buf[start:end]`` (remoting.message_codec's parser: pairs with an
    empty name or value dropped, later names win), read without copying the body; None when the record's
    lengths do not fit inside it."""
    if end - start < _BODY_AT:
        return None
    p = start + _BODY_AT + _BODY_LEN(buf, start + 84)[0]
    if p < start + _BODY_AT or p >= end:
        return None
    props_at = p + 1 + buf[p]
    if props_at + 2 > end:
        return None
    n = _PROPS_LEN(buf, props_at)[0]
    if n <= 0:
        return {}
    ps = props_at + 2
    if ps + n > end:
        return None
    out: dict[str, str] = {}
    for item in bytes(buf[ps : ps + n]).decode("utf-8", "replace").split("\x02"):
        name, _, value = item.partition("\x01")
        if name and value:
            out[name] = value
    return out


class PropertyFilter:
    """A compiled SQL92 subscription as the store's read path applies it (``match_record``)."""

    __slots__ = ("expression", "sql")

    def __init__(self, sql: SqlFilter) -> None:
        self.sql = sql
        self.expression = sql.expression

    def matches(self, props) -> bool:
        return self.sql.matches(props)

    def match_record(self, buf, start: int, end: int) -> bool:
        props = record_properties(buf, start, end)
        return props is not None and self.sql.matches(props)


class ConsumerFilters:
    """The compiled filters of every group, bounded by ``capacity`` (group, topic) entries."""

    def __init__(self, capacity: int = MAX_FILTERS) -> None:
        self.capacity = capacity
        self._table: OrderedDict[tuple[str, str], tuple[str, PropertyFilter | SqlFilterError]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._table)

    def get(self, group: str, topic: str, expression: str) -> PropertyFilter:
        """The group's compiled filter for ``topic``; raises ``SqlFilterError`` (with the position) for an
        expression RocketMQ refuses."""
        key = (group, topic)
        found = self._table.get(key)
        if found is not None and found[0] == expression:
            self._table.move_to_end(key)
            compiled = found[1]
        else:
            try:
                compiled = PropertyFilter(compile_filter(expression))
            except SqlFilterError as exc:
                compiled = exc
            self._table[key] = (expression, compiled)
            self._table.move_to_end(key)
            while len(self._table) > self.capacity:
                self._table.popitem(last=False)
        if isinstance(compiled, SqlFilterError):
            raise compiled.with_traceback(None)  # the remembered refusal, without the old raise's frames
        return compiled
