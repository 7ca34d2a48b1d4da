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


def guarded(response_type: type, handler: Callable[[Any, Any], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    name = f"{handler.__module__.rsplit('.', 1)[-1]}.{handler.__name__}"

    @functools.wraps(handler)
    async def method(self, request, context):  # grpc servicer signature
        try:
            return await handler(self.ctx, request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s failed", name)
            return response_type(
                code=int(ResponseCode.SYSTEM_ERROR),
                remark=f"{name} failed on the broker: {type(exc).__name__}: {exc}; retry, and report it if it repeats",
            )

    return method
