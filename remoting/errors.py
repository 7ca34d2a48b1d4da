"""Transport failures of a remoting call, each naming the address and what to do. Response codes are not
errors here: a response is returned to the caller whatever its code."""

from __future__ import annotations

from common.errors import PyrmqError


class RemotingError(PyrmqError):
    retriable = True

    def __init__(self, addr: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{addr}: {message}", hint=hint)
        self.addr = addr
        self.detail = message  # what failed, without the address


class RemotingConnectError(RemotingError):
    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(
            addr, f"cannot connect ({reason})", hint="check that the server runs and the address is reachable"
        )


class RemotingTimeoutError(RemotingError):
    def __init__(self, addr: str, timeout_s: float, request: str = "") -> None:
        what = f"{request} " if request else ""
        super().__init__(
            addr,
            f"{what}got no answer within {timeout_s:g} s",
            hint="the server may be overloaded, paused or partitioned; the request may still have taken effect",
        )
        self.timeout_s = timeout_s


class RemotingClosedError(RemotingError):
    def __init__(self, addr: str, reason: str = "connection closed") -> None:
        super().__init__(addr, f"{reason} before the answer arrived", hint="the request may have taken effect; retry")


class RemotingTooManyRequests(RemotingError):
    def __init__(self, addr: str, limit: int) -> None:
        super().__init__(
            addr, f"{limit} requests are already waiting for answers on this connection", hint="slow down and retry"
        )
