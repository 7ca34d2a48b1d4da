"""Progress of a long operation (sending many messages, waiting for a cluster) on stderr, for people only.

Scripts read stdout and often stderr too, so progress is off unless stderr is a terminal or ``--progress`` asks for
it. On a terminal one line is rewritten in place (at most ten times a second); elsewhere, with ``--progress``, a
line is written at most once a second, and always the final one, so a log shows how far it got without flooding.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

ProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress",
        help="Show progress on stderr (default: only when stderr is a terminal).",
        show_default=False,
    ),
]

TTY_EVERY_S = 0.1
LOG_EVERY_S = 1.0


class Progress:
    def __init__(self, enabled: bool | None) -> None:
        self.live = sys.stderr.isatty()
        self.enabled = self.live if enabled is None else enabled
        self._last_at = 0.0
        self._last_text = ""
        self._width = 0

    def update(self, text: str, *, force: bool = False) -> None:
        """Show ``text`` now, or drop it when the last one was shown too recently (unless ``force``)."""
        if not self.enabled or text == self._last_text:
            return
        now = time.monotonic()
        if not force and now - self._last_at < (TTY_EVERY_S if self.live else LOG_EVERY_S):
            return
        self._last_at, self._last_text = now, text
        if self.live:
            sys.stderr.write("\r" + text.ljust(self._width))
            self._width = len(text)
            sys.stderr.flush()
        else:
            typer.echo(text, err=True)

    def done(self, text: str | None = None) -> None:
        """The final state (always shown when enabled); ends the rewritten line on a terminal."""
        if not self.enabled:
            return
        if text is not None:
            self.update(text, force=True)
        if self.live and self._width:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._width = 0
