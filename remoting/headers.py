"""Typed reading of a request's extFields (RocketMQ's ``decodeCommandCustomHeader``), strict where Java is lax, and
the one strict number parser of the code base (``parse_int``, ``parse_host_port``).

Every value travels as text. Numbers are ASCII decimal with an optional sign and must fit the Java type
(``int`` 32-bit, ``long`` 64-bit); Unicode digits, blanks, fractions and overflow are refused (Python's
``int()`` would accept several of them). Booleans are ``true``/``false`` in any case, and ``1``/``0`` (the C++
client sends the latter). A missing required field or a bad value raises ``HeaderError`` naming the field and
what to send instead; the connection turns it into a response with 29 INVALID_PARAMETER. RocketMQ answers 1
SYSTEM_ERROR with the exception text, which tells a caller (a RocketMQ producer among them) that retrying may help;
the same request never parses, so pyrmq says it is the request's fault.

``parse_int`` applies the same rule to every other number that comes from outside the process: JSON body fields,
stored properties (DELAY, REAL_QID), file and directory names, addresses, config values. ``str.isdigit()`` is not
such a check: superscripts and other Unicode digits pass it and then make ``int()`` raise (``"²"``) or return a
number the sender never wrote (``"٣"`` is 3). A bad number raises ``NumberError``, a ``ValueError`` naming the value
and the range, so callers that already catch ``ValueError`` keep working.
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


class NumberError(ValueError):
    """Text (or a JSON value) that is not a strict ASCII decimal integer within its range."""


def parse_int(value: str | int, lo: int = LONG_MIN, hi: int = LONG_MAX, *, what: str = "value") -> int:
    """``value`` as an integer in ``lo..hi``: ASCII decimal text with an optional sign (at most 20 digits), or an
    ``int`` as a JSON parser returns it. Unicode digits, blanks, ``_``, fractions, exponents, ``bool`` and ``float``
    raise ``NumberError``; ``what`` names the value in the message."""
    if isinstance(value, str):
        if not (len(value) < 10 and value.isascii() and value.isdigit()) and not _DECIMAL.match(value):
            raise NumberError(f"{what}={value[:40]!r} is not a decimal integer (ASCII digits, optional sign)")
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = int(value)
    else:
        raise NumberError(f"{what} is {type(value).__name__} {str(value)[:40]!r}, not an integer")
    if not lo <= number <= hi:
        raise NumberError(f"{what}={number} does not fit in {lo}..{hi}")
    return number


def parse_host_port(addr: str, what: str = "address") -> tuple[str, int]:
    """``host:port`` (an IPv6 host may be bracketed; the brackets are dropped) with a port in 1..65535;
    ``NumberError`` (a ``ValueError``) names ``what`` and the text otherwise."""
    host, sep, port = addr.rpartition(":")
    host = host.strip("[]")
    if not sep or not host:
        raise NumberError(f"{what} {addr[:80]!r} is not host:port")
    try:
        return host, parse_int(port, 1, 65535, what="port")
    except NumberError as exc:
        raise NumberError(f"{what} {addr[:80]!r} is not host:port: {exc}") from None


class HeaderError(PyrmqError):
    """A request header field that is missing or does not parse."""

    def __init__(self, message: str, code: int = ResponseCode.INVALID_PARAMETER) -> None:
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
        try:
            return parse_int(value, lo, hi, what=f"header field {name}")
        except NumberError as exc:
            raise HeaderError(f"{self.what}: {exc}; send a decimal {kind}") from None

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
