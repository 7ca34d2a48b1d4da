"""JSON bodies as RocketMQ's fastjson writes and reads them (spec remoting.md §5.1).

fastjson writes map keys that are not strings without quotes: numbers bare (``{"offsetTable":{"T@G":{0:15}}}``)
and beans as inline objects (``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``). Neither is JSON, so
``loads`` is a small recursive-descent parser that accepts both besides standard JSON: a bare number key comes
back as an ``int``, an object key as a ``FrozenObject`` (hashable, with ``dict()`` for its fields; a key object
must hold string names and scalar values, as the beans fastjson writes do). Depth and size are bounded by the
caller's frame cap; recursion is capped at ``MAX_DEPTH``; a number longer than ``int()`` converts (4,300 digits)
is refused like any other bad input, with ``JsonBodyError``.

``dumps`` writes compact JSON (no blanks: Go's route parser splits on them) with numeric keys quoted, which
fastjson maps back to numbers; ``FrozenObject`` keys are written inline, as brokers write MessageQueue keys.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from common.errors import PyrmqError

MAX_DEPTH = 64
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WS = re.compile(r"[ \t\n\r]*")
_string_scanner = json.decoder.scanstring  # type: ignore[attr-defined]
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class JsonBodyError(PyrmqError):
    """A body that is neither JSON nor fastjson's dialect of it."""


class FrozenObject(tuple):
    """An object used as a map key (fastjson's inline bean keys): its sorted (name, value) items."""

    __slots__ = ()

    @classmethod
    def of(cls, mapping: dict[str, Any]) -> FrozenObject:
        return cls(sorted(mapping.items()))

    def dict(self) -> dict[str, Any]:
        return dict(self)


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)  # the common case: standard JSON, parsed in C
    except (orjson.JSONDecodeError, TypeError):
        pass
    try:
        text = bytes(data).decode("utf-8") if not isinstance(data, str) else data
    except UnicodeDecodeError as exc:
        raise JsonBodyError(f"JSON body is not UTF-8: {exc}") from None
    parser = _Parser(text)
    value = parser.value(0)
    parser.skip_ws()
    if parser.pos != len(text):
        parser.fail("trailing characters after the value")
    return value


class _Parser:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, why: str) -> None:
        raise JsonBodyError(f"JSON body does not parse at character {self.pos}: {why}")

    def skip_ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH}")
        self.skip_ws()
        text, pos = self.text, self.pos
        if pos >= len(text):
            self.fail("unexpected end")
        ch = text[pos]
        if ch == "{":
            return self.obj(depth)
        if ch == "[":
            return self.arr(depth)
        if ch == '"':
            try:
                s, self.pos = _string_scanner(text, pos + 1, True)
            except ValueError as exc:
                self.fail(str(exc))
            return s
        for word, val in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, pos):
                self.pos = pos + len(word)
                return val
        m = _NUMBER.match(text, pos)
        if not m:
            self.fail(f"unexpected {ch!r}")
        self.pos = m.end()
        token = m.group()
        if any(c in token for c in ".eE"):
            return float(token)
        try:
            return int(token)
        except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits, 4300 by default)
            self.fail(f"a number of {len(token)} digits is too long")

    def obj(self, depth: int) -> dict:
        self.pos += 1
        out: dict = {}
        self.skip_ws()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            key = self.value(depth + 1)
            if isinstance(key, dict):
                key = self.bean_key(key)
            elif isinstance(key, list):
                self.fail("an array cannot be a key")
            self.skip_ws()
            if not self.text.startswith(":", self.pos):
                self.fail("expected ':'")
            self.pos += 1
            out[key] = self.value(depth + 1)
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            self.fail("expected ',' or '}'")

    def bean_key(self, fields: dict) -> FrozenObject:
        """An inline object key is a bean (a MessageQueue): string names, scalar values. Anything else could
        not be hashed or ordered, and no fastjson writer produces it."""
        for name, value in fields.items():
            if not isinstance(name, str) or isinstance(value, (dict, list)):
                self.fail("an object used as a key may only hold string names with scalar values")
        return FrozenObject.of(fields)

    def arr(self, depth: int) -> list:
        self.pos += 1
        out: list = []
        self.skip_ws()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return out
            self.fail("expected ',' or ']'")


def dumps(value: Any) -> bytes:
    """Compact JSON; ``FrozenObject`` keys inline (fastjson style), other keys as JSON strings.

    orjson first, which refuses a tuple key: only then is the value walked for ``FrozenObject`` keys (a walk of
    every value in Python cost a 10,000-topic GET_ALL_TOPIC_CONFIG 45 ms of the event loop, orjson 3 ms)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        if not _has_object_keys(value):
            raise
    return _dump_inline(value).encode()


def _has_object_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return any(isinstance(k, FrozenObject) or _has_object_keys(v) for k, v in value.items())
    if isinstance(value, (list, tuple)) and not isinstance(value, FrozenObject):
        return any(_has_object_keys(v) for v in value)
    return False


def _dump_inline(value: Any) -> str:
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = _encode(k.dict()) if isinstance(k, FrozenObject) else _encode(str(k) if not isinstance(k, str) else k)
            items.append(f"{key}:{_dump_inline(v)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)) and not isinstance(value, FrozenObject):
        return "[" + ",".join(_dump_inline(v) for v in value) + "]"
    return _encode(value)
