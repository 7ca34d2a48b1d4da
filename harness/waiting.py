"""Bounded waits that say what they waited for (ducktape's wait_until)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


class WaitTimeout(AssertionError):
    pass


def wait_until(
    condition: Callable[[], Any], timeout_s: float, err_msg: str | Callable[[], str], interval_s: float = 0.05
) -> Any:
    """Poll ``condition`` until it returns a truthy value (returned) or ``timeout_s`` passes (WaitTimeout)."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # keep the last failure as the cause
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = err_msg() if callable(err_msg) else err_msg
            raise WaitTimeout(f"after {timeout_s:.1f}s: {msg}") from last_exc
        time.sleep(interval_s)


async def async_wait_until(
    condition: Callable[[], Any | Awaitable[Any]],
    timeout_s: float,
    err_msg: str | Callable[[], str],
    interval_s: float = 0.05,
) -> Any:
    """``wait_until`` for a coroutine: the same loop, written again because it awaits the condition and the pause
    (one loop for both would make the blocking one a coroutine too)."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            value = condition()
            if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
                value = await value
            if value:
                return value
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = err_msg() if callable(err_msg) else err_msg
            raise WaitTimeout(f"after {timeout_s:.1f}s: {msg}") from last_exc
        await asyncio.sleep(interval_s)
