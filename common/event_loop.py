"""Which asyncio event loop pyrmq's processes run on: uvloop when it is installed (a dependency on Linux and
macOS), else the standard loop.

Why: every request crosses grpcio's completion queue into the loop and wakes a few tasks; uvloop does that work
in C. In ``bench.e2e_bench`` it cut the broker's CPU per message by about 9% and the client's by 9% (see the
README's figures). ``PYRMQ_EVENT_LOOP=asyncio`` picks the standard loop, to rule the loop out when debugging.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
ENV = "PYRMQ_EVENT_LOOP"


def loop_name() -> str:
    """``"uvloop"`` or ``"asyncio"``: what ``run`` will use in this process."""
    wanted = os.environ.get(ENV, "uvloop").strip().lower()
    if wanted not in ("uvloop", "asyncio"):
        raise ValueError(f"{ENV}={wanted!r}: use uvloop or asyncio")
    if wanted == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "asyncio"
    return wanted


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop ``loop_name`` picks."""
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)
