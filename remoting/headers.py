"""Typed reading of a request's extFields (RocketMQ's ``decodeCommandCustomHeader``), strict where Java is lax.

Every value travels as text. Numbers are ASCII decimal with an optional sign and must fit the Java type
(``int`` 32-bit, ``long`` 64-bit); Unicode digits, blanks, fractions and overflow are refused (Python's
``int()`` would accept several of them). Booleans are ``true``/``false`` in any case, and ``1``/``0`` (the C++
client sends the latter). A missing required field or a bad value raises ``HeaderError`` naming the field and
what to send instead; processors turn it into a response (RocketMQ answers SYSTEM_ERROR with the text).
"""

from __future__ import annotations

import re

from common.errors import PyrmqError
from remoting.codes import ResponseCode

_DECIMAL = re.compile(r"[+-]?[0-9]{1,20}\Z", re.ASCII)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


class HeaderError(PyrmqError):
    """A request header field that is missing or does not parse."""

    def __init__(self, message: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.code = int(code)


class Fields:
    """Typed getters over one request's extFields; ``what`` names the request in error texts."""

    __slots__ = ("ext", "what")

    def __init__(self, ext: dict[str, str] | None, what: str = "request") -> None:
        self.ext = ext or {}
        self.what = what

    def _raw(self, name: str, required: bool) -> str | None:
        value = self.ext.get(name)
        if value is None or value == "":
            if required:
                raise HeaderError(f"{self.what}: header field {name} is missing; send it (see the request's header)")
            return None
        return value

    def str(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self._raw(name, required)
        return default if value is None else value

    def req_str(self, name: str) -> str:
        value = self._raw(name, True)
        assert value is not None
        return value

    def _number(self, name: str, value: str, lo: int, hi: int, kind: str) -> int:
        if len(value) < 10 and value.isascii() and value.isdigit():  # the common case: small, unsigned
            return int(value)
        if not _DECIMAL.match(value):
            raise HeaderError(f"{self.what}: header field {name}={value[:40]!r} is not a decimal {kind}")
        number = int(value)
        if not lo <= number <= hi:
            raise HeaderError(f"{self.what}: header field {name}={number} does not fit a {kind} ({lo}..{hi})")
        return number

    def int(self, name: str, default: int | None = None, *, required: bool = False) -> int | None:
        value = self._raw(name, required)
        return default if value is None else self._number(name, value, INT_MIN, INT_MAX, "32-bit int")

    def req_int(self, name: str) -> int:
        return self._number(name, self.req_str(name), INT_MIN, INT_MAX, "32-bit int")

    def long(self, name: str, default: int | None = None, *, required: bool = False) -> int | None:
        value = self._raw(name, required)
        return default if value is None else self._number(name, value, LONG_MIN, LONG_MAX, "64-bit long")

    def req_long(self, name: str) -> int:
        return self._number(name, self.req_str(name), LONG_MIN, LONG_MAX, "64-bit long")

    def bool(self, name: str, default: bool = False) -> bool:
        value = self._raw(name, False)
        if value is None:
            return default
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise HeaderError(f"{self.what}: header field {name}={value[:40]!r} is not true/false")
