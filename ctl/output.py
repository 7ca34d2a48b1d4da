"""One output object for every command: mqadmin-style tables by default, a JSON document with ``--json``.

A command builds its data once and hands it over with the lines a person should read; ``Output.show`` prints
one or the other, never both, so a script can parse ``--json`` output whole. Tables are mqadmin's: ``#``-headed,
left-aligned columns separated by two spaces, so ``awk`` scripts written for mqadmin keep working.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import typer


@dataclass(frozen=True)
class Column:
    header: str  # printed after '#'
    key: str  # key of the row dict (and of the JSON object)


def format_table(columns: Sequence[Column], rows: Iterable[Mapping[str, Any]]) -> list[str]:
    headers = [f"#{c.header}" for c in columns]
    cells = [[_cell(row.get(c.key)) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    return [line(headers)] + [line(r) for r in cells]


def format_kv(pairs: Mapping[str, Any], *, prefix: str = "", sort: bool = True) -> list[str]:
    """``key : value`` lines, keys padded to one width (brokerStatus)."""
    keys = sorted(pairs) if sort else list(pairs)
    width = max((len(k) for k in keys), default=0)
    return [f"{prefix}{k.ljust(width)} : {_cell(pairs[k])}" for k in keys]


def human_time(epoch_ms: int) -> str:
    """RocketMQ's timeMillisToHumanString2: local time with milliseconds; N/A for 0."""
    if epoch_ms <= 0:
        return "N/A"
    seconds, millis = divmod(int(epoch_ms), 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f",{millis:03d}"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


class Output:
    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode

    def lines(self, data: Any, lines: Iterable[str]) -> list[str]:
        """What ``show`` prints, as lines (repeat mode redraws them): ``data`` as JSON in JSON mode, else ``lines``."""
        if self.json_mode:
            return json.dumps(data, indent=2, default=str).splitlines()
        return list(lines)

    def table_lines(
        self, columns: Sequence[Column], rows: list[dict[str, Any]], footer: Sequence[str] = ()
    ) -> list[str]:
        """What ``table`` prints, as lines."""
        return self.lines(rows, [*format_table(columns, rows), *footer])

    def show(self, data: Any, lines: Iterable[str]) -> None:
        """Print ``data`` as JSON in JSON mode, else the human ``lines``."""
        for text in self.lines(data, lines):
            typer.echo(text)

    def table(self, columns: Sequence[Column], rows: list[dict[str, Any]], footer: Sequence[str] = ()) -> None:
        """A table; JSON mode prints the list of row objects."""
        self.show(rows, [*format_table(columns, rows), *footer])

    def progress(self, text: str) -> None:
        """A line for people while work goes on; silent in JSON mode so stdout stays one document."""
        if not self.json_mode:
            typer.echo(text)

    def warning(self, text: str) -> None:
        typer.echo(f"warning: {text}", err=True)
