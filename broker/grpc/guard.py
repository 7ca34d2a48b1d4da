"""Turns an unexpected exception in a handler into an in-band SYSTEM_ERROR answer (the proxy's
GlobalExceptionInterceptor): the caller gets a code and a remark instead of a gRPC failure, and the log gets the
traceback once, with the RPC name. gRPC status codes stay reserved for transport failures (DESIGN.md §3).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from remoting.codes import ResponseCode

log = logging.getLogger("broker.grpc")

Handler = Callable[[Any, Any], Awaitable[Any]]


def handler_name(handler: Handler) -> str:
    return f"{handler.__module__.rsplit('.', 1)[-1]}.{handler.__name__}"


async def run_guarded(name: str, response_type: type, handler: Handler, ctx: Any, request: Any) -> Any:
    """``await handler(ctx, request)``, or a SYSTEM_ERROR ``response_type`` when it raises."""
    try:
        return await handler(ctx, request)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("%s failed", name)
        return response_type(
            code=int(ResponseCode.SYSTEM_ERROR),
            remark=f"{name} failed on the broker: {type(exc).__name__}: {exc}; retry, and report it if it repeats",
        )


def guarded(response_type: type, handler: Handler) -> Callable[..., Awaitable[Any]]:
    """A unary servicer method (``self, request, context``) around ``handler(ctx, request)``."""
    name = handler_name(handler)

    @functools.wraps(handler)
    async def method(self, request, context):  # grpc servicer signature
        return await run_guarded(name, response_type, handler, self.ctx, request)

    return method
