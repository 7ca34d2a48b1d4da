"""Error base classes that carry data and say what to do next.

Every error a user or operator can meet carries a ``hint`` (the next step) and a ``retriable`` flag, so retry
logic asks the error instead of keeping lists of types, and the CLI can print one line plus the hint.
"""

from __future__ import annotations


class PyrmqError(Exception):
    """Base of all pyrmq errors. ``str(err)`` is the message followed by the hint."""

    retriable: bool = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}; {self.hint}"
        return self.message


class ConfigError(PyrmqError):
    """A configuration file or value that cannot be used; raised before anything starts."""

    def __init__(self, message: str, *, source: str, key: str | None = None, hint: str | None = None) -> None:
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {message}", hint=hint)
        self.source = source
        self.key = key
