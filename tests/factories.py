"""Factory fixtures: a fixture hands the test ``make(...)`` and, at teardown, ends everything it made; and the
test CA every TLS test makes (``certs_or_skip``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from harness.tls_certs import CertsUnavailable, CertSet, make_certs

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


def certs_or_skip(root: Path, services: list[str]) -> CertSet:
    """A new CA and certificates for ``services`` in ``root`` (harness.tls_certs); skips the test, saying why, where
    openssl is missing and cannot be installed."""
    try:
        return make_certs(root, services)
    except CertsUnavailable as exc:
        pytest.skip(str(exc))
