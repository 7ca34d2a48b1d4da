"""Repeat mode for report commands: mqadmin's ``-i SECONDS``, bounded by ``--count N``.

An operator watching a failover wants the same report every few seconds in one place, not a scrolling log; a
script wants each report whole. So on a terminal every report redraws the screen in place under a header line
(``Every 2s: mqctl clusterList ... <time>``); on a pipe or file the reports follow one another as blocks separated
by a blank line (``--json``: one JSON document each), with no escape codes. Ctrl-C ends the loop with exit code 0.
A report that fails with a known error (a broker down in the middle of a failover) shows that error in its place
and the loop goes on; the exit code is 1 only when the last report failed.

How to apply it to a command that reads the cluster (clusterList in ctl/cluster.py is the model)::

    from ctl.watch import CountOpt, IntervalOpt, repeat_on_cluster

    def my_command(..., json: JsonOpt = False, interval: IntervalOpt = None, count: CountOpt = None):
        out = Output(json)

        def report(cluster: Cluster) -> list[str]:
            rows = ...  # build the data exactly as the one-shot command did
            return out.table_lines(COLUMNS, rows)  # or out.lines(data, human_lines)

        repeat_on_cluster(namesrv, report, interval, count, title="myCommand")

Without ``-i`` the report is printed once and its errors propagate, so the one-shot command is unchanged. The
report must return its lines instead of printing them (``Output.lines`` / ``Output.table_lines``); ``repeat``
takes any report, ``repeat_on_cluster`` one that reads the cluster.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from ctl.errors import describe

if TYPE_CHECKING:
    from ctl.rpc import Cluster

IntervalOpt = Annotated[
    float | None,
    typer.Option(
        "-i",
        "--interval",
        min=0.1,
        help="Repeat the report every this many seconds (mqadmin's -i); Ctrl-C stops.",
    ),
]
CountOpt = Annotated[
    int | None,
    typer.Option("--count", min=1, help="With -i: stop after this many reports (default: until Ctrl-C)."),
]

HOME = "\x1b[H"  # cursor to the top-left corner
CLEAR_SCREEN = "\x1b[2J"
CLEAR_LINE_END = "\x1b[K"
CLEAR_BELOW = "\x1b[J"


def repeat_on_cluster(
    namesrv: str,
    report: Callable[[Cluster], Sequence[str]],
    interval_s: float | None,
    count: int | None = None,
    *,
    title: str,
) -> None:
    """``repeat`` a report that reads the cluster, over one connection; before each report the cached cluster
    info is forgotten, so every report asks the nameserver again (a failover changes the masters)."""
    from ctl.rpc import Cluster  # the SDK loads only when a command runs, not for --help

    with Cluster(namesrv) as cluster:

        def once() -> Sequence[str]:
            cluster.refresh()
            return report(cluster)

        repeat(once, interval_s, count, title=title)


def repeat(
    report: Callable[[], Sequence[str]],
    interval_s: float | None,
    count: int | None = None,
    *,
    title: str,
) -> None:
    """Print ``report()`` once (``interval_s`` None), or every ``interval_s`` seconds until ``count`` reports
    were shown or Ctrl-C; raise typer.Exit(1) when the last report failed."""
    if interval_s is None:
        if count is not None:
            raise typer.BadParameter("--count repeats a report: pass -i SECONDS with it", param_hint="--count")
        _write(report())
        return
    live = sys.stdout.isatty()
    shown = 0
    failed = False
    try:
        while count is None or shown < count:
            started = time.monotonic()
            try:
                lines, failed = list(report()), False
            except typer.Exit:
                raise
            except Exception as exc:
                text = describe(exc)
                if text is None:
                    raise
                lines, failed = [f"error: {text}"], True
            if live:
                header = f"Every {interval_s:g}s: mqctl {title}    {time.strftime('%Y-%m-%d %H:%M:%S')}"
                _redraw([header, "", *lines], first=shown == 0)
            else:
                if shown:
                    _write([""])
                _write(lines, err=failed)
            shown += 1
            if count is not None and shown >= count:
                break
            time.sleep(max(0.0, started + interval_s - time.monotonic()))  # a report slower than -i runs back to back
    except KeyboardInterrupt:
        if live:
            sys.stdout.write("\n")
            sys.stdout.flush()
        return
    if failed:
        raise typer.Exit(1)


def _write(lines: Sequence[str], err: bool = False) -> None:
    for line in lines:
        typer.echo(line, err=err)


def _redraw(lines: Sequence[str], first: bool) -> None:
    """Overwrite the previous report in place: no blank flash between two reports."""
    text = (CLEAR_SCREEN if first else "") + HOME + "".join(f"{line}{CLEAR_LINE_END}\n" for line in lines)
    sys.stdout.write(text + CLEAR_BELOW)
    sys.stdout.flush()
