"""Logging for every process: one line per record on stdout, so containers and test harnesses see it all.

``RateLimitedLog`` is for events a peer can cause at will (malformed frames, refused oneway requests): each
becomes at most one line per interval, with the count of the lines left out, so a hostile or broken client cannot
fill the disk or bury the log.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def setup_logging(level: str | int = "INFO") -> None:
    """Route the root logger to stdout; safe to call twice (the second call only changes the level)."""
    root = logging.getLogger()
    if not any(getattr(h, "pyrmq_handler", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.pyrmq_handler = True  # type: ignore[attr-defined]  # marks the one handler this function adds
        root.addHandler(handler)
    root.setLevel(level)


class RateLimitedLog:
    """At most one record per ``every_s`` seconds through ``logger``, with the count of those left out."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0) -> None:
        self.logger = logger
        self.every_s = every_s
        self._next = 0.0
        self._suppressed = 0

    def warning(self, msg: str, *args: Any) -> None:
        self.log(logging.WARNING, msg, *args)

    def exception(self, msg: str, *args: Any) -> None:
        """ERROR with the traceback of the exception being handled (at most one traceback per interval)."""
        self.log(logging.ERROR, msg, *args, exc_info=True)

    def log(self, level: int, msg: str, *args: Any, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        if self._suppressed:
            msg += f" ({self._suppressed} similar lines suppressed)"
            self._suppressed = 0
        self._next = now + self.every_s
        self.logger.log(level, msg, *args, exc_info=exc_info)
