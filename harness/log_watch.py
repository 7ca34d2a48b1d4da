"""The logs of the server processes the harness started, and what each wrote since the current test began.

``harness.procs`` tells ``WATCH`` when a server starts (its log and the offset it starts writing at) and when it
stops (what it wrote is read then, before a test can remove its directory); the pytest plugin
(``harness.pytest_log_check``) calls ``begin_test`` before each test's setup and ``take_findings`` after its call
and its teardown. Idle until the first ``begin_test``: a benchmark's servers are not scanned.
"""

from __future__ import annotations

from pathlib import Path

from harness.log_scan import Finding, find_programming_errors

REPO_ROOT = Path(__file__).resolve().parents[1]
SCAN_BYTES_MAX = 64 * 1024 * 1024  # of one log per collection: more than any test writes; the newest part is kept


class LogWatch:
    """Offsets into the watched logs (bytes read so far) and the findings read since ``begin_test``."""

    def __init__(self, own_roots: tuple[Path, ...] = (REPO_ROOT,)) -> None:
        self.own_roots = own_roots
        self.active = False
        self._offsets: dict[Path, int] = {}
        self._stopped: set[Path] = set()
        self._findings: list[tuple[Path, Finding]] = []

    def started(self, log_path: Path, offset: int) -> None:
        """A server starts appending to ``log_path`` at ``offset`` (a restart keeps the earlier offset)."""
        if self.active:
            self._offsets.setdefault(log_path, offset)
            self._stopped.discard(log_path)

    def stopped(self, log_path: Path) -> None:
        """A server stopped: read what it wrote now; stop watching its log after this test."""
        if self.active and log_path in self._offsets:
            self._collect(log_path)
            self._stopped.add(log_path)

    def begin_test(self) -> None:
        """Watch from here on: what the servers wrote between tests belongs to no test."""
        self.active = True
        for path in list(self._offsets):
            try:
                self._offsets[path] = path.stat().st_size
            except FileNotFoundError:
                del self._offsets[path]
        self._findings.clear()

    def take_findings(self) -> list[tuple[Path, Finding]]:
        """The findings in what every watched log got since ``begin_test`` (or the last call), each once."""
        for path in list(self._offsets):
            self._collect(path)
        for path in self._stopped:
            self._offsets.pop(path, None)
        self._stopped.clear()
        findings, self._findings = self._findings, []
        return findings

    def _collect(self, path: Path) -> None:
        """Scan ``path`` from its offset up to its last complete line, and move the offset there."""
        offset = self._offsets[path]
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, 2)
                start = max(min(offset, size), size - SCAN_BYTES_MAX)  # a truncated log: from its start
                fh.seek(start)
                data = fh.read(size - start)
        except FileNotFoundError:
            del self._offsets[path]
            return
        complete = data.rfind(b"\n") + 1
        if complete == 0:
            return
        self._offsets[path] = start + complete
        text = data[:complete].decode("utf-8", "replace")
        self._findings.extend((path, f) for f in find_programming_errors(text, self.own_roots))


WATCH = LogWatch()
