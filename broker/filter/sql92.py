"""RocketMQ's SQL92 property filter (``MessageSelector.bySql``, v2 ``FilterExpression{type: SQL}``): parse once,
evaluate per message as a tree of closures over the message's properties.

Grammar (RocketMQ's, from ActiveMQ's selector; keywords case-insensitive)::

    expr       := and (OR and)*
    and        := not (AND not)*
    not        := NOT not | predicate
    predicate  := operand ( ('=' | '<>' | '>' | '>=' | '<' | '<=') operand
                          | [NOT] BETWEEN operand AND operand
                          | [NOT] IN '(' string (',' string)* ')'
                          | IS [NOT] NULL
                          | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string )?
    operand    := ('+' | '-') operand | number | string | TRUE | FALSE | NULL | identifier | '(' expr ')'
    identifier := [A-Za-z_$] [A-Za-z0-9_$.]*        a property name; TAGS is the message's tag
    string     := '...' with '' for a quote;  number := digits [L] | digits '.' digits [exponent] | ...

Semantics (RocketMQ's, three-valued): a missing property is NULL; a comparison with NULL is unknown; NOT unknown is
unknown; AND / OR are evaluated left to right with short cuts (FALSE AND x = FALSE, TRUE OR x = TRUE, unknown
otherwise); a message matches only when the whole expression is TRUE. Property values are strings: compared with a
number they are converted (an integer literal converts with Java's ``Long.valueOf``, a decimal one with
``Double.valueOf``); two strings under ``< <= > >=`` compare as doubles; ``=`` between strings is exact. A value
that does not convert makes the evaluation fail, and RocketMQ's broker then does not deliver the message: the same
here (``matches`` answers False), so a filter matches exactly what it matches on RocketMQ. pyrmq converts only ASCII
digits (Java also takes other Unicode digits).

Refused at compile time with the position of the problem (``SqlFilterError``): what does not parse, operands that
cannot be ordered (``a > 'x'``, ``a < TRUE``), ``= NULL`` (use IS NULL), integers beyond 64 bits, and expressions
longer than ``MAX_LENGTH`` characters or nested deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from common.errors import PyrmqError

MAX_LENGTH = 4096
MAX_DEPTH = 64
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

Props = Mapping[str, str]
Eval = Callable[[Props], object]

KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "CONTAINS", "STARTSWITH", "ENDSWITH"}

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?|[0-9]+[eE][+-]?[0-9]+[dDfF]?|[0-9]+[dDfF])
      | (?P<int>[0-9]+[lL]?)
      | (?P<str>'(?:[^']|'')*')
      | (?P<name>[A-Za-z_$][A-Za-z0-9_$.]*)
      | (?P<op><>|>=|<=|=|>|<|\(|\)|,|\+|-)
    """,
    re.VERBOSE | re.ASCII,
)


class SqlFilterError(PyrmqError):
    """An expression RocketMQ's broker would refuse at subscription; ``position`` is a 0-based character index."""

    def __init__(self, message: str, text: str, position: int) -> None:
        shown = text if len(text) <= 120 else text[:117] + "..."
        super().__init__(f"SQL92 filter: {message} at position {position + 1} of {shown!r}",
                         hint="fix the expression (RocketMQ's grammar: = <> > >= < <= BETWEEN IN IS [NOT] NULL "
                              "AND OR NOT, 'strings', numbers, TRUE FALSE)")
        self.position = position


class _EvalFailed(Exception):
    """A value that does not convert: the message does not match (RocketMQ logs and skips it)."""


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # int float str name kw op end
    text: str
    pos: int
    value: object = None


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SqlFilterError(f"unexpected character {text[pos]!r}", text, pos)
        kind, raw = m.lastgroup, m.group()
        if kind == "int":
            value = int(raw.rstrip("lL"))
            if value > LONG_MAX + 1:  # LONG_MIN's magnitude is allowed only after a minus, checked by the parser
                raise SqlFilterError(f"integer {raw} does not fit 64 bits", text, pos)
            out.append(_Tok("int", raw, pos, value))
        elif kind == "float":
            out.append(_Tok("float", raw, pos, float(raw.rstrip("dDfF"))))
        elif kind == "str":
            out.append(_Tok("str", raw, pos, raw[1:-1].replace("''", "'")))
        elif kind == "name":
            upper = raw.upper()
            out.append(_Tok("kw", upper, pos) if upper in KEYWORDS else _Tok("name", raw, pos, raw))
        elif kind == "op":
            out.append(_Tok("op", raw, pos))
        pos = m.end()
    out.append(_Tok("end", "", len(text)))
    return out


# Operand kinds the compile-time checks look at (RocketMQ's checkLessThanOperand / checkEqualOperand).
_NUMBER, _STRING, _BOOL, _NULL, _PROPERTY, _PREDICATE = "number", "string", "boolean", "null", "property", "predicate"


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str
    fn: Eval
    const: object = None


def _java_long(s: str) -> int:
    body = s[1:] if s[:1] in "+-" else s
    if not body or not body.isascii() or not body.isdigit():
        raise _EvalFailed
    value = int(s)
    if not LONG_MIN <= value <= LONG_MAX:
        raise _EvalFailed
    return value


_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)", re.ASCII)


def _java_double(s: str) -> float:
    t = s.strip()
    if _JAVA_DOUBLE.fullmatch(t) is None:
        raise _EvalFailed
    return float(t.rstrip("fFdD") if t[-1] in "fFdD" else t)


def _order(lv: object, rv: object) -> int:
    """Java's compareTo after RocketMQ's conversions (string conversion on): <0, 0 or >0."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is str:
            if rt is bool:
                lv = lv.lower() == "true"  # type: ignore[union-attr]
            elif rt is int:
                lv = _java_long(lv)  # type: ignore[arg-type]
            else:
                lv = _java_double(lv)  # type: ignore[arg-type]
        elif rt is str:
            if lt is bool:
                rv = rv.lower() == "true"  # type: ignore[union-attr]
            elif lt is int:
                rv = _java_long(rv)  # type: ignore[arg-type]
            else:
                rv = _java_double(rv)  # type: ignore[arg-type]
        elif lt is bool or rt is bool:
            return -1  # RocketMQ answers -1 for types it cannot bring together
        else:
            lv, rv = float(lv), float(rv)  # type: ignore[arg-type]
    if lv != lv or rv != rv:  # NaN: Java's Double.compareTo puts it above everything and equal to itself
        return (lv != lv) - (rv != rv)
    return (lv > rv) - (lv < rv)  # type: ignore[operator]


def _make_compare(op: str, left: Eval, right: Eval) -> Eval:
    test = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}[op]

    def compare(p: Props) -> object:
        lv = left(p)
        if lv is None:
            return None
        rv = right(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            return test(_order(_java_double(lv), _java_double(rv)))
        return test(_order(lv, rv))

    return compare


def _make_equal(left: Eval, right: Eval) -> Eval:
    def equal(p: Props) -> object:
        lv, rv = left(p), right(p)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None or (type(lv) is type(rv) and lv == rv):
            return True
        return _order(lv, rv) == 0

    return equal


def _not(f: Eval) -> Eval:
    def negate(p: Props) -> object:
        v = f(p)
        return None if v is None else not v

    return negate


def _and(a: Eval, b: Eval) -> Eval:
    def both(p: Props) -> object:
        lv = a(p)
        if lv is False:
            return False
        rv = b(p)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return both


def _or(a: Eval, b: Eval) -> Eval:
    def either(p: Props) -> object:
        lv = a(p)
        if lv is True:
            return True
        rv = b(p)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return either


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0
        self.names: set[str] = set()

    # token helpers ---------------------------------------------------------------------------------------
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def error(self, message: str, tok: _Tok | None = None) -> SqlFilterError:
        tok = tok or self.tok
        return SqlFilterError(message, self.text, tok.pos)

    def take(self, kind: str, text: str | None = None) -> _Tok | None:
        t = self.tok
        if t.kind == kind and (text is None or t.text == text):
            self.i += 1
            return t
        return None

    def need(self, kind: str, text: str, what: str) -> _Tok:
        t = self.take(kind, text)
        if t is None:
            found = self.tok.text or "the end"
            raise self.error(f"expected {what}, found {found!r}")
        return t

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH} levels")

    # grammar ---------------------------------------------------------------------------------------------
    def parse(self) -> _Node:
        node = self.expr()
        if self.tok.kind != "end":
            raise self.error(f"unexpected {self.tok.text!r}")
        return _Node(_PREDICATE, self.condition(node, self.toks[0]))

    def expr(self) -> _Node:
        self.enter()
        node = self.conj()
        while self.take("kw", "OR"):
            right = self.conj()
            node = _Node(_PREDICATE, _or(self.condition(node), self.condition(right)))
        self.depth -= 1
        return node

    def conj(self) -> _Node:
        node = self.negation()
        while self.take("kw", "AND"):
            right = self.negation()
            node = _Node(_PREDICATE, _and(self.condition(node), self.condition(right)))
        return node

    def negation(self) -> _Node:
        start = self.tok
        if self.take("kw", "NOT"):
            self.enter()
            inner = self.negation()
            self.depth -= 1
            return _Node(_PREDICATE, _not(self.condition(inner, start)))
        return self.predicate()

    def condition(self, node: _Node, at: _Tok | None = None) -> Eval:
        """RocketMQ's asBooleanExpression: a property used as a condition is TRUE only if it holds a boolean, which
        a message property (a string) never does: FALSE when present, unknown when missing."""
        if node.kind in (_NUMBER, _STRING, _NULL):
            raise self.error(f"a {node.kind} is not a condition", at)
        if node.kind == _PROPERTY:
            fn = node.fn

            def cast(p: Props) -> object:
                v = fn(p)
                return None if v is None else v is True

            return cast
        return node.fn

    def predicate(self) -> _Node:
        left_tok = self.tok
        left = self.operand()
        t = self.tok
        if t.kind == "op" and t.text in ("=", "<>"):
            self.i += 1
            right_tok = self.tok
            right = self.operand()
            for node, at in ((left, left_tok), (right, right_tok)):
                if node.kind == _NULL:
                    raise self.error("NULL cannot be compared with = or <>; use IS NULL or IS NOT NULL", at)
            if left.kind == _BOOL and right.kind in (_NUMBER, _STRING):
                raise self.error(f"a boolean cannot be compared with a {right.kind}", right_tok)
            eq = _make_equal(left.fn, right.fn)
            return _Node(_PREDICATE, eq if t.text == "=" else _not(eq))
        if t.kind == "op" and t.text in (">", ">=", "<", "<="):
            self.i += 1
            right_tok = self.tok
            right = self.operand()
            self.orderable(left, left_tok)
            self.orderable(right, right_tok)
            return _Node(_PREDICATE, _make_compare(t.text, left.fn, right.fn))
        if t.kind == "kw" and t.text == "IS":
            self.i += 1
            negated = self.take("kw", "NOT") is not None
            self.need("kw", "NULL", "NULL after IS [NOT]")
            fn = left.fn

            def is_null(p: Props) -> object:
                return fn(p) is None

            return _Node(_PREDICATE, _not(is_null) if negated else is_null)
        negated = False
        if t.kind == "kw" and t.text == "NOT":
            if self.toks[self.i + 1].text not in ("BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"):
                raise self.error("NOT after a value must be followed by BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH")
            self.i += 1
            negated = True
        t = self.tok
        if t.kind == "kw" and t.text == "BETWEEN":
            self.i += 1
            self.orderable(left, left_tok)
            low_tok = self.tok
            low = self.operand()
            self.orderable(low, low_tok)
            self.need("kw", "AND", "AND in BETWEEN ... AND ...")
            high_tok = self.tok
            high = self.operand()
            self.orderable(high, high_tok)
            if negated:
                return _Node(_PREDICATE, _or(_make_compare("<", left.fn, low.fn), _make_compare(">", left.fn, high.fn)))
            return _Node(_PREDICATE, _and(_make_compare(">=", left.fn, low.fn), _make_compare("<=", left.fn, high.fn)))
        if t.kind == "kw" and t.text == "IN":
            self.i += 1
            if left.kind != _PROPERTY:
                raise self.error("IN needs a property on its left", left_tok)
            self.need("op", "(", "( after IN")
            values = {self.string("IN's list")}
            while self.take("op", ","):
                values.add(self.string("IN's list"))
            self.need("op", ")", ") closing IN's list")
            return _Node(_PREDICATE, self._in(left.fn, frozenset(values), negated))
        if t.kind == "kw" and t.text in ("CONTAINS", "STARTSWITH", "ENDSWITH"):
            self.i += 1
            search = self.string(t.text)
            return _Node(_PREDICATE, self._text_op(t.text, left.fn, search, negated))
        return left

    @staticmethod
    def _in(fn: Eval, values: frozenset[str], negated: bool) -> Eval:
        def member(p: Props) -> object:
            v = fn(p)
            if type(v) is not str:
                return None
            return (v in values) != negated

        return member

    @staticmethod
    def _text_op(op: str, fn: Eval, search: str, negated: bool) -> Eval:
        test = {"CONTAINS": str.__contains__, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}[op]

        def text_op(p: Props) -> object:
            v = fn(p)
            if not search or type(v) is not str:
                return False
            return test(v, search) != negated

        return text_op

    def string(self, where: str) -> str:
        t = self.take("str")
        if t is None:
            raise self.error(f"{where} takes 'quoted strings'")
        return t.value  # type: ignore[return-value]

    def orderable(self, node: _Node, at: _Tok) -> None:
        if node.kind in (_STRING, _BOOL, _NULL, _PREDICATE):
            raise self.error(f"a {node.kind} cannot be compared with > >= < <= or BETWEEN (only numbers and "
                             "properties)", at)

    def operand(self) -> _Node:
        t = self.tok
        if t.kind == "op" and t.text in ("+", "-"):
            self.i += 1
            self.enter()
            inner_tok = self.tok
            inner = self.operand()
            self.depth -= 1
            if inner.kind != _NUMBER:
                raise self.error(f"{t.text} applies to numbers only", inner_tok)
            value = inner.const if t.text == "+" else -inner.const  # type: ignore[operator]
            return self.number(value, t)
        if t.kind in ("int", "float"):
            self.i += 1
            if t.kind == "int" and t.value > LONG_MAX and self.i >= 2 and self.toks[self.i - 2].text == "-":
                return _Node(_NUMBER, lambda p: None, t.value)  # only as the operand of '-': LONG_MIN
            return self.number(t.value, t)
        if t.kind == "str":
            self.i += 1
            value = t.value
            return _Node(_STRING, lambda p: value, value)
        if t.kind == "kw" and t.text in ("TRUE", "FALSE"):
            self.i += 1
            flag = t.text == "TRUE"
            return _Node(_BOOL, lambda p: flag, flag)
        if t.kind == "kw" and t.text == "NULL":
            self.i += 1
            return _Node(_NULL, lambda p: None)
        if t.kind == "name":
            self.i += 1
            name = t.text
            self.names.add(name)
            get = _getter(name)
            return _Node(_PROPERTY, get)
        if self.take("op", "("):
            node = self.expr()
            self.need("op", ")", "a closing )")
            return node
        found = t.text or "the end"
        raise self.error(f"expected a value, a property or (, found {found!r}")

    def number(self, value: object, at: _Tok) -> _Node:
        if isinstance(value, int) and not LONG_MIN <= value <= LONG_MAX:
            raise self.error(f"integer {value} does not fit 64 bits", at)
        return _Node(_NUMBER, lambda p: value, value)


def _getter(name: str) -> Eval:
    def get(p: Props) -> object:
        return p.get(name)

    return get


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A compiled expression; ``properties`` names every property it reads."""

    expression: str
    properties: frozenset[str]
    _fn: Eval

    def matches(self, props: Props) -> bool:
        try:
            return self._fn(props) is True
        except _EvalFailed:
            return False


def compile_filter(expression: str) -> SqlFilter:
    """Parse ``expression``; raises ``SqlFilterError`` saying where and what is wrong."""
    if len(expression) > MAX_LENGTH:
        raise SqlFilterError(f"longer than {MAX_LENGTH} characters", expression, MAX_LENGTH)
    if not expression.strip():
        raise SqlFilterError("the expression is empty", expression, 0)
    parser = _Parser(expression)
    node = parser.parse()
    return SqlFilter(expression, frozenset(parser.names), node.fn)
