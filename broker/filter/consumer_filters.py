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


class _Ambiguous(Exception):
    """A property written twice or with an empty value: the full parse decides."""


class _RecordProps:
    """A record's properties as the filter reads them (``get``), each looked up in the mapping when first asked:
    a byte search (the separators are single bytes that never occur inside UTF-8 sequences) that copies nothing
    but the value."""

    __slots__ = ("buf", "needles", "pe", "ps")

    def __init__(self, buf, ps: int, pe: int, needles: dict[str, tuple[bytes, bytes]]) -> None:
        self.buf, self.ps, self.pe, self.needles = buf, ps, pe, needles

    def get(self, name: str, default: object = None) -> str | None:
        buf, ps, pe = self.buf, self.ps, self.pe
        needle, head = self.needles[name]
        if buf[ps : ps + len(head)] == head:  # the first property has no separator before it
            i = ps + len(head)
        else:
            i = buf.find(needle, ps, pe)
            if i < 0:
                return None
            i += len(needle)
        j = buf.find(b"\x02", i, pe)
        if j < 0:
            j = pe
        if j == i or buf.find(needle, j, pe) >= 0:
            raise _Ambiguous
        return buf[i:j].decode("utf-8", "replace")


class PropertyFilter:
    """A compiled SQL92 subscription as the store's read path applies it (``match_record``): only the properties
    the expression reads are looked up, when it reads them; a name written twice or with an empty value takes the
    full parse, whose rules (later names win, empty values dropped) then decide."""

    __slots__ = ("_needles", "expression", "sql")

    def __init__(self, sql: SqlFilter) -> None:
        self.sql = sql
        self.expression = sql.expression
        self._needles = {name: (b"\x02" + name.encode() + b"\x01", name.encode() + b"\x01")
                         for name in sql.properties}

    def matches(self, props) -> bool:
        return self.sql.matches(props)

    def match_record(self, buf, start: int, end: int) -> bool:
        if end - start < _BODY_AT:
            return False
        p = start + _BODY_AT + _BODY_LEN(buf, start + 84)[0]
        if p < start + _BODY_AT or p >= end:
            return False
        props_at = p + 1 + buf[p]
        if props_at + 2 > end:
            return False
        n = _PROPS_LEN(buf, props_at)[0]
        ps = props_at + 2
        if n < 0 or ps + n > end:
            return False
        try:
            return self.sql.matches(_RecordProps(buf, ps, ps + n, self._needles))
        except _Ambiguous:
            return self.sql.matches(record_properties(buf, start, end) or {})


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
