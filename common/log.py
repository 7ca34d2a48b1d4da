"""Logging for every process: one line per record on stdout, so containers and test harnesses see it all."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def setup_logging(level: str | int = "INFO") -> None:
    """Route the root logger to stdout; safe to call twice (the second call only changes the level)."""
    root = logging.getLogger()
    if not any(getattr(h, "_pyrmq", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler._pyrmq = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)
