"""Strict loading of RocketMQ-style ``key=value`` files into frozen dataclasses.

RocketMQ fills its config objects by reflection and silently ignores unknown keys and unparsable values, so a
typo such as ``brokerRol=SLAVE`` leaves a broker running as a master. Here an unknown key or a bad value stops
the process with an error naming the file, the line, the key and the closest valid key.

Conventions:
- Dataclass fields are snake_case; the file key is the camelCase form (``mapped_file_size_commit_log`` <->
  ``mappedFileSizeCommitLog``) unless the field declares ``metadata={"key": ...}`` (``brokerIP1``).
- Values: ``int`` (ASCII decimal digits with an optional sign: ``int()`` alone would take ``1_000`` and
  Unicode digits such as ``٣``), ``float``, ``bool`` (``true``/``false``, any case), ``str``, and ``Enum``
  subclasses by member name.
- A numeric field may declare its range with ``ranged(default, lo, hi, why)`` (metadata ``range`` and
  ``why``); a value outside it stops the load with the range and the reason, so a port of 99999 or a file
  size of 10^20 never reaches the code that would wrap or fail on it later.
- The file must be UTF-8; a byte that is not is reported with its line, not as a traceback.
- ``# comment`` and ``! comment`` lines and blank lines are skipped; ``key=value``, ``key = value`` and
  ``key: value`` are accepted, as in Java properties files.
- A dataclass may validate itself in ``__post_init__`` by raising ``ValueError``; the message is reported
  with the file name.
- A field that holds a secret, or says where one is (``haAuthSecret``, ``haAuthSecretFile``), is declared with
  ``secret()``: ``render`` (``--print-config``, GET_BROKER_CONFIG) shows ``SECRET_MARKER`` (``<set>``) when it is
  set and nothing when it is not, its ``repr`` leaves it out, and no error of this module quotes a line's value. A
  new secret key is redacted everywhere by being declared so; ``tests/unit/test_config_secrets.py`` walks every
  config dataclass for fields named like secrets that are not.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from common.errors import ConfigError

T = TypeVar("T")

_CAMEL_BOUNDARY = re.compile(r"_([a-z0-9])")
_ASCII_INT = re.compile(r"[+-]?[0-9]+")
_ASCII_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")

SECRET_MARKER = "<set>"  # what config reads show for a secret that is set (never its value, never a path)

PORT_MAX = 65535
JAVA_INT_MAX = 2**31 - 1  # RocketMQ holds most numeric keys in a Java int: a larger value is no RocketMQ setting


def ranged(default: Any, lo: float | None, hi: float | None, why: str, **metadata: Any) -> Any:
    """A dataclass field whose loaded value must lie in ``[lo, hi]`` (``None``: unbounded on that side).

    ``why`` says what the bounds protect (or what a special value such as 0 means); it becomes the error's hint.
    """
    return dataclasses.field(default=default, metadata={"range": (lo, hi), "why": why, **metadata})


def secret(default: str = "", **metadata: Any) -> Any:
    """A field that holds a secret or names the file it is in: redacted by ``render``, left out of ``repr``."""
    return dataclasses.field(default=default, repr=False, metadata={"secret": True, **metadata})


def is_secret(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get("secret")) if field.metadata else False


def port(default: int, zero_means: str | None = None, **metadata: Any) -> Any:
    """A TCP port field: 1..65535, or 0..65535 when 0 has a documented meaning (``zero_means``)."""
    if zero_means:
        return ranged(default, 0, PORT_MAX, f"a TCP port; 0 means {zero_means}", **metadata)
    return ranged(default, 1, PORT_MAX, "a TCP port", **metadata)


def range_problem(field: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with ``value`` for ``field``'s declared range, or None (also for fields without one)."""
    bounds = field.metadata.get("range") if field.metadata else None
    if bounds is None or value is None:
        return None
    lo, hi = bounds
    if (lo is None or value >= lo) and (hi is None or value <= hi):
        return None
    if lo is not None and hi is not None:
        allowed = f"between {lo} and {hi}"
    elif lo is not None:
        allowed = f"at least {lo}"
    else:
        allowed = f"at most {hi}"
    return f"{value} is out of range: must be {allowed}"


def check_range(field: dataclasses.Field, value: Any, *, source: str, key: str) -> None:
    """Raise ConfigError when ``value`` is outside the field's declared range."""
    problem = range_problem(field, value)
    if problem is not None:
        raise ConfigError(problem, source=source, key=key, hint=field.metadata.get("why") or "use a value in range")


def validate_ranges(obj: Any) -> None:
    """For ``__post_init__``: raise ValueError (``"<key>: <problem>; <why>"``) for the first field out of range,
    so objects built in code (tests, tools) get the checks the loader applies to files."""
    for field in dataclasses.fields(obj):
        problem = range_problem(field, getattr(obj, field.name))
        if problem is not None:
            raise ValueError(f"{conf_key(field)}: {problem}; {field.metadata.get('why')}")


def conf_key(field: dataclasses.Field) -> str:
    """The file key of a dataclass field."""
    explicit = field.metadata.get("key") if field.metadata else None
    if explicit:
        return explicit
    return _CAMEL_BOUNDARY.sub(lambda m: m.group(1).upper(), field.name)


def conf_keys(cls: type) -> dict[str, dataclasses.Field]:
    return {conf_key(f): f for f in dataclasses.fields(cls) if f.init}


def parse_properties(text: str, source: str) -> dict[str, tuple[str, int]]:
    """Parse properties text into ``{key: (value, line_number)}``; a key given twice is an error."""
    out: dict[str, tuple[str, int]] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if not match:
            # Only the start of the line is quoted: the rest may be a secret's value (``haAuthSecret 0123...``).
            start = re.split(r"[=:\s]", line, maxsplit=1)[0][:40]
            raise ConfigError(
                f"line {lineno} is not 'key=value' (it starts with {start!r}; the rest is not shown)",
                source=source, hint="write one key=value per line",
            )
        key, value = match.group(1), match.group(2).strip()
        if key in out:
            raise ConfigError(
                f"given twice (lines {out[key][1]} and {lineno})", source=source, key=key, hint="keep one of them"
            )
        out[key] = (value, lineno)
    return out


def closest_key(key: str, valid: Iterable[str]) -> str | None:
    valid = list(valid)
    lowered = {k.lower(): k for k in valid}
    if key.lower() in lowered:
        return lowered[key.lower()]
    matches = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _convert(raw: str, typ: Any, *, source: str, key: str) -> Any:
    origin = typing.get_origin(typ)
    if origin is typing.Union or (origin is not None and str(origin) == "types.UnionType"):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if raw == "" and len(args) != len(typing.get_args(typ)):
            return None
        typ = args[0]
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        try:
            return typ[raw.strip().upper()]
        except KeyError:
            names = ", ".join(m.name for m in typ)
            raise ConfigError(f"{raw!r} is not one of {names}", source=source, key=key, hint=f"use one of {names}")
    if typ is bool:
        lowered = raw.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ConfigError(f"{raw!r} is not a boolean", source=source, key=key, hint="use true or false")
    if typ is int:
        text = raw.strip()
        if not _ASCII_INT.fullmatch(text):
            raise ConfigError(f"{raw!r} is not an integer", source=source, key=key,
                              hint="use a whole number written with the digits 0-9")
        try:
            return int(text)
        except ValueError:  # more digits than int() converts (4,300 by default): no setting is that large
            raise ConfigError(f"an integer of {len(text)} characters is too long", source=source, key=key,
                              hint="use a whole number that fits the setting's range") from None
    if typ is float:
        text = raw.strip()
        if not _ASCII_FLOAT.fullmatch(text):
            raise ConfigError(f"{raw!r} is not a number", source=source, key=key,
                              hint="use a number written with the digits 0-9")
        return float(text)
    if typ is str:
        return raw
    raise TypeError(f"unsupported config field type {typ!r} for {key}")


def build(classes: tuple[type, ...], values: Mapping[str, str], *, source: str) -> tuple[Any, ...]:
    """Build one instance of each class from ``values`` (file key -> raw string).

    A key must belong to at least one class; a key declared by several classes feeds all of them.
    """
    per_class: list[dict[str, Any]] = [{} for _ in classes]
    all_keys: dict[str, list[int]] = {}
    hints_by_class = []
    for idx, cls in enumerate(classes):
        keys = conf_keys(cls)
        hints_by_class.append(typing.get_type_hints(cls))
        for key in keys:
            all_keys.setdefault(key, []).append(idx)
    for key, raw in values.items():
        owners = all_keys.get(key)
        if not owners:
            near = closest_key(key, all_keys)
            hint = f"did you mean {near}?" if near else "remove it; see --print-config for the valid keys"
            raise ConfigError("unknown key", source=source, key=key, hint=hint)
        for idx in owners:
            field = conf_keys(classes[idx])[key]
            if is_secret(field) and raw.strip() == SECRET_MARKER:
                raise ConfigError(f"{SECRET_MARKER} is what --print-config shows for a secret that is set, not a "
                                  "secret", source=source, key=key, hint="put the secret itself (or use the key that "
                                  "names a file holding it)")
            value = _convert(raw, hints_by_class[idx][field.name], source=source, key=key)
            check_range(field, value, source=source, key=key)
            per_class[idx][field.name] = value
    built = []
    for cls, kwargs in zip(classes, per_class):
        try:
            built.append(cls(**kwargs))
        except ValueError as exc:
            raise ConfigError(str(exc), source=source, hint="fix the value and start again") from None
    return tuple(built)


def load(
    classes: tuple[type, ...], path: str | Path | None, *, overrides: Mapping[str, str] | None = None
) -> tuple[Any, ...]:
    """Load ``path`` (or nothing) plus ``overrides`` (already-resolved key -> value) into ``classes``."""
    values: dict[str, str] = {}
    source = str(path) if path else "<defaults>"
    if path is not None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"cannot read: {exc.strerror}", source=source, hint="pass an existing file with -c"
            ) from None
        text = decode_text(data, source)
        values = {k: v for k, (v, _) in parse_properties(text, source).items()}
    for key, value in (overrides or {}).items():
        values[key] = value
    return build(classes, values, source=source)


def decode_text(data: bytes, source: str) -> str:
    """The file's text; a byte that is not UTF-8 is a ConfigError naming its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"line {line}, column {column}: byte 0x{data[exc.start]:02x} is not UTF-8",
            source=source,
            hint="save the file as UTF-8 (non-ASCII values are rare in broker.conf: check for a stray character)",
        ) from None


def render(obj: Any) -> list[tuple[str, str]]:
    """The effective ``(key, value)`` pairs of a config object, in declaration order (for --print-config and
    GET_BROKER_CONFIG). A ``secret()`` field reads ``SECRET_MARKER`` when set, "" when not: never its value."""
    out = []
    for field in dataclasses.fields(obj):
        if not field.init:
            continue
        value = getattr(obj, field.name)
        if is_secret(field):
            text = SECRET_MARKER if value else ""
        elif isinstance(value, enum.Enum):
            text = value.name
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif value is None:
            text = ""
        else:
            text = str(value)
        out.append((conf_key(field), text))
    return out


def env_overrides(environ: Mapping[str, str], mapping: Mapping[str, str]) -> dict[str, str]:
    """Pick deployment overrides from the environment: ``mapping`` is env var -> file key."""
    return {key: environ[var] for var, key in mapping.items() if environ.get(var)}
