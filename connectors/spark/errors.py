"""Errors of the Spark connector: each says what happened, the values involved and what to do."""

from __future__ import annotations

from common.errors import PyrmqError


class ConnectorError(PyrmqError):
    """Base of the connector's errors."""


class OptionError(ConnectorError):
    """An option of ``format("pyrmq")`` is missing or has a value that cannot work."""

    def __init__(self, option: str, problem: str, hint: str) -> None:
        super().__init__(f"pyrmq option {option!r}: {problem}", hint=hint)
        self.option = option


class DataLossError(ConnectorError):
    """Requested offsets were deleted from the broker (below the queue's min offset)."""

    def __init__(self, queue: str, wanted: int, min_offset: int) -> None:
        super().__init__(
            f"{queue}: offsets [{wanted}, {min_offset}) were deleted by the broker (retention, or the queue was"
            f" recreated); the query wanted {wanted}, the queue now starts at {min_offset}",
            hint="set failOnDataLoss=false to skip ahead and log it, or restart the query with a new checkpoint",
        )
        self.queue = queue
        self.wanted = wanted
        self.min_offset = min_offset


class BrokerRefusal(ConnectorError):
    """A broker answered a pull or send with a code that will not succeed by waiting."""

    def __init__(self, what: str, addr: str, code: int, remark: str) -> None:
        from remoting.codes import describe

        super().__init__(
            f"{what} refused by {addr}: {describe(code)}: {remark or 'no remark'}",
            hint="see the broker's remark; check the topic, the consumer/producer group and broker permissions",
        )
        self.addr = addr
        self.code = code


class Unavailable(ConnectorError):
    """No node of a broker group answered (or none had the data) within the time allowed."""

    retriable = True

    def __init__(self, what: str, detail: str, timeout_s: float) -> None:
        super().__init__(
            f"{what}: {detail} (gave up after {timeout_s:.0f}s)",
            hint="check that the broker group's master or slave is up (mqctl clusterList); Spark retries the task",
        )
