"""Which asyncio event loop pyrmq's processes run on: uvloop when it is installed (a dependency on Linux and
macOS), else the standard loop.

Why: every remoting frame is a socket read, a protocol callback and a task wake-up in the loop; uvloop does the
socket and scheduling work in C. ``bench.remoting_bench`` measures the remoting layer's server CPU per request on
either loop (``PYRMQ_EVENT_LOOP=asyncio`` picks the standard one, also to rule the loop out when debugging).
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
