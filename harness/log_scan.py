"""Find programming errors in a server's log text (pure: text in, findings out).

A request processor that raises ``AttributeError`` is only logged by the remoting layer ("request code N ...
failed", rate-limited); the client gets an error or a timeout the test may tolerate, so the bug can hide behind
passing tests for weeks. The harness runs ``find_programming_errors`` over what each server logged during a test
and fails the test on any finding.

What counts: the last exception of a traceback (a chain's earlier links were handled) when it is one of
``ALWAYS_BUGS``, or ``KeyError``/``IndexError`` raised in a frame of our own code (the traceback's last frame is
under one of ``own_roots`` and not in an installed package); asyncio's reports of a task or callback that died
(``Task exception was never retrieved``, ``Exception in callback``) and ``coroutine ... was never awaited``.
Expected failures (``ConnectionResetError``, ``TimeoutError``, a ``ValueError`` refusing a bad frame) do not count.
Handles both the servers' format (``2026-11-29 02:02:10,072 ERROR name: msg``) and pytest's captured-log format
(``ERROR    name:file.py:12 msg``), and exception-group tracebacks (``| `` prefixed lines).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ALWAYS_BUGS = frozenset({
    "AttributeError", "NameError", "TypeError", "UnboundLocalError", "ImportError", "ModuleNotFoundError",
    "AssertionError",
})
BUGS_IN_OWN_CODE = frozenset({"KeyError", "IndexError"})
ASYNCIO_DEATHS = (
    re.compile(r"Task exception was never retrieved"),
    re.compile(r"Exception in callback "),
    re.compile(r"coroutine '?[\w.<>]+'? was never awaited"),
)
EXCERPT_LINES_MAX = 40
RECORD_LINES_MAX = 500  # how far up from a traceback its log record's first line is looked for
INSTALLED_PACKAGE_DIRS = ("site-packages", "dist-packages")

_TRACEBACK = re.compile(r"^(?:Exception Group )?Traceback \(most recent call last\):")
_CHAIN = re.compile(r"^(?:During handling of the above exception|The above exception was the direct cause)")
_FRAME = re.compile(r'^ {2}File "([^"]+)", line \d+')
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")
# a new log record: the servers' format (common.log.FORMAT) or pytest's default captured-log format
_RECORD_START = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+ |(?:CRITICAL|ERROR|WARNING|INFO|DEBUG) +\S+:)")
_GROUP_PREFIX = re.compile(r"^\s*[|+] ?")
_GROUP_RULE = re.compile(r"^\s*\+[-+]")


@dataclass(frozen=True)
class Finding:
    """One programming error: why it counts, where it is in the text (the character offset of its exception line
    or asyncio report: distinct for each finding, so a caller scanning a growing log twice can skip what it has
    reported), and an excerpt (the log record's first line through the exception line, at most
    ``EXCERPT_LINES_MAX`` lines)."""

    reason: str
    offset: int
    excerpt: str


def find_programming_errors(text: str, own_roots: Sequence[Path | str]) -> list[Finding]:
    """The programming errors in ``text``, in order. ``own_roots`` are the directories of our own code (the repo)."""
    lines = text.splitlines(keepends=True)
    starts = _line_offsets(lines)
    plain = [_strip_group_prefix(line.rstrip("\r\n")) for line in lines]
    roots = tuple(str(Path(r).resolve()) + "/" for r in own_roots)
    findings = []
    reported_records = set()  # an asyncio report and the traceback it carries are one finding
    for i, line in enumerate(plain):
        death = next((p for p in ASYNCIO_DEATHS if p.search(line)), None)
        if death is not None:
            reported_records.add(i)  # asyncio's report is the first line of its record (or of its stderr warning)
            findings.append(_finding(f"asyncio: {death.pattern}", lines, starts, i, i, _asyncio_end(plain, i)))
        elif _TRACEBACK.match(line):
            end = _traceback_end(plain, i)
            reason = _judge(plain, i, end, roots) if end is not None else None
            record = _record_start_before(plain, i)
            if reason is not None and record not in reported_records:
                findings.append(_finding(reason, lines, starts, record, end, end))
    return findings


def _traceback_end(plain: list[str], header: int) -> int | None:
    """The index of the exception line ending the traceback at ``header`` (None when the text is cut off)."""
    for j in range(header + 1, len(plain)):
        line = plain[j]
        if not line.strip() or line.startswith(" ") or _TRACEBACK.match(line):
            continue
        if _RECORD_START.match(line) or not _EXCEPTION.match(line):
            return None
        return j
    return None


def _judge(plain: list[str], header: int, end: int, roots: tuple[str, ...]) -> str | None:
    """Why the traceback from ``header`` to ``end`` (its exception line) is a programming error, or None."""
    if _is_chained(plain, end):
        return None
    name = _EXCEPTION.match(plain[end]).group(1).rsplit(".", 1)[-1]
    if name in ALWAYS_BUGS:
        return name
    frames = [m.group(1) for m in map(_FRAME.match, plain[header + 1:end]) if m]
    if name in BUGS_IN_OWN_CODE and frames and _is_own(frames[-1], roots):
        return f"{name} raised in {frames[-1]}"
    return None


def _asyncio_end(plain: list[str], index: int) -> int:
    """The last line of an asyncio report: the exception line of the traceback in its record, if it has one; else
    the report and the lines that belong to it (a warning's source line and hint), at most two more."""
    for j in range(index + 1, min(len(plain), index + 4)):
        if _TRACEBACK.match(plain[j]):
            return _traceback_end(plain, j) or j
        if _RECORD_START.match(plain[j]):
            return j - 1
    return min(len(plain) - 1, index + 2)


def _is_chained(plain: list[str], exc_line: int) -> bool:
    """Another exception follows this one in the same chain (it was handled, the later one is what escaped)."""
    for line in plain[exc_line + 1:]:
        if _CHAIN.match(line):
            return True
        if _TRACEBACK.match(line) or _RECORD_START.match(line) or _GROUP_RULE.match(line):
            return False
    return False


def _is_own(path: str, roots: tuple[str, ...]) -> bool:
    return path.startswith(roots) and not any(f"/{d}/" in path for d in INSTALLED_PACKAGE_DIRS)


def _strip_group_prefix(line: str) -> str:
    """An exception group prints its members' lines behind ``| `` (nested deeper for nested groups)."""
    if _GROUP_PREFIX.match(line) and not _GROUP_RULE.match(line):
        return _GROUP_PREFIX.sub("", line, count=1)
    return line


def _record_start_before(plain: list[str], index: int) -> int:
    """The line where the log record holding line ``index`` begins: a record's first line, or the first line of
    text written around the log (``Exception in thread ...:`` before a traceback on stderr)."""
    for j in range(index, max(-1, index - RECORD_LINES_MAX), -1):
        line = plain[j]
        if _RECORD_START.match(line):
            return j
        if line.strip() and not line.startswith(" ") and not (
                _TRACEBACK.match(line) or _CHAIN.match(line) or _EXCEPTION.match(line)):
            return j
    return index


def _line_offsets(lines: list[str]) -> list[int]:
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line)
    return offsets


def _finding(reason: str, lines: list[str], starts: list[int], record: int, at: int, last: int) -> Finding:
    """The record's first line, then up to ``EXCERPT_LINES_MAX`` lines ending at ``last``; located at line ``at``."""
    first = max(record + 1, last - EXCERPT_LINES_MAX + 2)
    elided = ["  ...\n"] if first > record + 1 else []
    excerpt = "".join([lines[record], *elided, *lines[first:last + 1]]) if last > record else lines[record]
    return Finding(reason, starts[at], excerpt.rstrip("\n"))
