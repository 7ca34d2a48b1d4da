"""Errors the SDK raises: each carries the values involved, a hint (the next step) and ``retriable``.

Retry logic asks the error (``err.retriable``), never a list of types (aiokafka's KafkaError habit).
Transport failures (the peer did not answer) are ``NoAnswerError``: ``BrokerUnreachableError`` or
``RequestTimeout``; answers with a non-success code are ``BrokerError``, whose ``retriable`` depends on the code.

What a caller may act on is a field, never only text: ``request`` (what the client was doing) and
``request_code`` / ``request_name`` (the RequestCode of the one request that failed, 0 / "" when none), the
address, ``BrokerError.code`` (``response_code``) and ``remark``, ``BrokerUnreachableError.status`` and
``details``, ``RequestTimeout.timeout_s``, ``NoNameserverError.last`` (the last nameserver's error).
"""

from __future__ import annotations

from common.errors import PyrmqError
from remoting.codes import RequestCode, ResponseCode, describe


class MQClientError(PyrmqError):
    """Base of every error the client SDK raises."""

    request: str = ""  # what the client was doing ("SEND_BATCH_MESSAGE (320)", "send to MessageQueue[...]")
    request_code: int = 0  # the RequestCode of the request that failed; 0 when the error is not about one

    @property
    def request_name(self) -> str:
        """The RequestCode's name (``GET_BROKER_RUNTIME_INFO``), "" when there is none or it is unknown."""
        try:
            return RequestCode(self.request_code).name if self.request_code else ""
        except ValueError:
            return ""


class ClientStateError(MQClientError):
    """A method was called on a client that is not started (or already stopped)."""

    def __init__(self, what: str, state: str) -> None:
        super().__init__(f"{what} is {state}", hint="call start() first and stop() last")


class NoNameserverError(MQClientError):
    """None of the configured nameservers answered."""

    retriable = True

    def __init__(self, addrs: list[str], last: MQClientError | None = None) -> None:
        where = ";".join(addrs) if addrs else "(none configured)"
        detail = f" (last error: {last.message})" if last is not None else ""
        super().__init__(
            f"no nameserver reachable at {where}{detail}",
            hint="check -n/NAMESRV_ADDR and that the nameservers are running",
        )
        self.addrs = list(addrs)
        self.last = last  # the last nameserver's error (a NoAnswerError), None when none was tried

    @property
    def last_error(self) -> str:
        return self.last.message if self.last is not None else ""


class NoRouteError(MQClientError):
    """The nameserver knows no route for the topic (TOPIC_NOT_EXIST), or the route has no usable queue."""

    def __init__(self, topic: str, detail: str = "", cluster: str = "CLUSTER") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"no route for topic {topic}{extra}",
            hint=f"create it with mqctl updateTopic -t {topic} -c {cluster} or enable autoCreateTopicEnable",
        )
        self.topic = topic
        self.detail = detail


class BrokerNotFoundError(MQClientError):
    """The cached route names no address for a broker group (RocketMQ's "broker not exist")."""

    retriable = True

    def __init__(self, broker_name: str) -> None:
        super().__init__(
            f"no address known for broker group {broker_name}",
            hint="the group left the cluster or its route is stale; the client refreshes routes every 30 s",
        )
        self.broker_name = broker_name


# Codes after which the same request may succeed later or on another broker.
_RETRIABLE_CODES = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.NO_PERMISSION,
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
    }
)


class BrokerError(MQClientError):
    """A broker (or nameserver) answered with a code that is not success; ``remark`` is the server's reason."""

    def __init__(self, code: int, remark: str, broker_addr: str, *, request: str = "", request_code: int = 0) -> None:
        what = f"{request} " if request else ""
        super().__init__(
            f"{what}refused by {broker_addr}: {describe(code)}: {remark or 'no remark'}",
            hint=_hint_for(code),
        )
        self.code = int(code)
        self.remark = remark
        self.broker_addr = broker_addr
        self.request = request
        self.request_code = int(request_code)
        self.retriable = self.code in _RETRIABLE_CODES

    @property
    def response_code(self) -> int:
        return self.code


def _hint_for(code: int) -> str:
    if code == ResponseCode.SYSTEM_BUSY:
        return "the broker is overloaded; retry later or slow down"
    if code == ResponseCode.TOPIC_NOT_EXIST:
        return ("from a master: create the topic with mqctl updateTopic or enable autoCreateTopicEnable; from a"
                " slave: it has not synced the topic from its master yet, so retry or read from the master")
    if code == ResponseCode.NO_PERMISSION:
        return "check the topic/group permissions and the broker's brokerPermission"
    if code == ResponseCode.MESSAGE_ILLEGAL:
        return "fix the message (size, topic name, properties); retrying will not help"
    if code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
        return "create the group with mqctl updateSubGroup or enable autoCreateSubscriptionGroup"
    if code == ResponseCode.SERVICE_NOT_AVAILABLE:
        return "the broker cannot serve this now (slave, stopping, disk full); retry on another broker"
    return "see the broker log for details"


class NoAnswerError(MQClientError):
    """No answer came from ``addr``: the transport failed or the deadline passed. Another broker, or this one a
    little later, may answer."""

    retriable = True

    def __init__(self, addr: str, problem: str, *, request: str, hint: str, request_code: int = 0) -> None:
        what = f"{request} to " if request else ""
        super().__init__(f"{what}{addr} {problem}", hint=hint)
        self.addr = addr
        self.request = request
        self.request_code = int(request_code)


class BrokerUnreachableError(NoAnswerError):
    """The transport failed: connection refused or lost before the answer, or too many requests waiting on it."""

    def __init__(self, addr: str, status: str, details: str = "", *, request: str = "", request_code: int = 0) -> None:
        super().__init__(
            addr,
            f"failed: {status}{': ' + details if details else ''}",
            request=request,
            request_code=request_code,
            hint="the server is down or unreachable; the client avoids it for a few seconds and retries elsewhere",
        )
        self.status = status
        self.details = details


class RequestTimeout(NoAnswerError):
    """No answer within the deadline; the request may or may not have been applied."""

    def __init__(self, addr: str, timeout_s: float, *, request: str = "", request_code: int = 0) -> None:
        super().__init__(
            addr,
            f"got no answer within {timeout_s:.1f}s",
            request=request,
            request_code=request_code,
            hint="the server is slow, paused or partitioned; a retried send may be stored twice",
        )
        self.timeout_s = timeout_s


class ProducerClosedError(MQClientError):
    """The producer stopped before this message could be sent."""

    def __init__(self) -> None:
        super().__init__("the producer is stopped; the message was not sent", hint="send before calling stop()")
