"""Factory fixtures: a fixture hands the test ``make(...)`` and, at teardown, ends everything it made."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def closing_each(build: Callable[..., T], close: Callable[[T], object]) -> Iterator[Callable[..., T]]:
    """The body of a factory fixture (``yield from``): yields ``make``, which passes its arguments to ``build`` and
    keeps what it returns; at teardown ``close`` ends each one, in the order they were made."""
    made: list[T] = []

    def make(*args: object, **kwargs: object) -> T:
        made.append(build(*args, **kwargs))
        return made[-1]

    yield make
    for thing in made:
        close(thing)
