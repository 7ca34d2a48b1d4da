"""The errors mqctl knows, and the one place that turns any known exception into one line of text.

Every message names what failed and ends with what to do next (``PyrmqError`` joins message and hint with
``; ``). ``describe()`` returns None for an exception it does not know, so real bugs keep their traceback.
The SDK and docker are looked up in ``sys.modules`` instead of imported: if a command never imported them, no
exception of theirs can be in flight, and ``mqctl --help`` stays free of both imports.
"""

from __future__ import annotations

import sys

from common.errors import PyrmqError

NAMESRV_HINT = "start one or pass -n host:port / set NAMESRV_ADDR"
DOCKER_HINT = "start dockerd or use `mqctl dev up`"


class CtlError(PyrmqError):
    """Base of the errors mqctl raises itself."""


class NamesrvUnreachable(CtlError):
    retriable = True

    def __init__(self, addrs: str, detail: str = "") -> None:
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"no nameserver reachable at {addrs}{suffix}", hint=NAMESRV_HINT)
        self.addrs = addrs


class BrokerUnreachable(CtlError):
    retriable = True

    def __init__(self, addr: str, method: str, detail: str) -> None:
        super().__init__(
            f"broker {addr} did not answer {method} ({detail})",
            hint="check that it runs (mqctl clusterList) or pass another -b",
        )
        self.addr = addr


class Refused(CtlError):
    """A server answered with a non-success ResponseCode."""

    def __init__(self, who: str, method: str, code: int, remark: str) -> None:
        from remoting.codes import describe

        text = f"{who} refused {method}: {describe(code)}"
        super().__init__(f"{text}: {remark}" if remark else text)
        self.code = code
        self.remark = remark


class UnknownName(CtlError):
    """A broker, cluster or topic name that the nameserver does not know."""

    def __init__(self, kind: str, name: str, known: list[str], hint: str | None = None) -> None:
        listing = ", ".join(sorted(known)) if known else "(none registered)"
        super().__init__(f"unknown {kind} {name}: known {kind}s are {listing}", hint=hint)
        self.name = name


class TopicNotFound(CtlError):
    def __init__(self, topic: str, why: str = "") -> None:
        super().__init__(
            f"topic {topic} has no route on the nameserver" + (f" ({why})" if why else ""),
            hint=f"create it with `mqctl updateTopic -c <cluster> -t {topic}` or check the name with `mqctl topicList`",
        )


class DockerUnavailable(CtlError):
    def __init__(self, detail: str) -> None:
        super().__init__(f"no Docker engine reachable ({detail})", hint=DOCKER_HINT)


class NoComposeProject(CtlError):
    def __init__(self, project: str, running: list[str]) -> None:
        running_text = ", ".join(running) if running else "none"
        super().__init__(
            f"no such compose project {project}: no container is labelled com.docker.compose.project={project} "
            f"(projects with containers: {running_text})",
            hint="start it with `docker compose up -d`, or pass --project / set COMPOSE_PROJECT_NAME",
        )


class DevClusterError(CtlError):
    pass


def _from_sdk(exc: BaseException) -> CtlError | None:
    """The SDK's transport errors said the way an operator needs them (its hints are for applications)."""
    sdk = sys.modules.get("client.errors")
    if sdk is None:
        return None
    if isinstance(exc, sdk.NoNameserverError):
        return NamesrvUnreachable(";".join(exc.addrs), "")
    if isinstance(exc, sdk.BrokerUnreachableError | sdk.RequestTimeout):
        return BrokerUnreachable(exc.addr, exc.request_name or "the request", transport_reason(exc))
    return None


# The SDK's transport statuses (client/rpc.py) in an operator's words.
TRANSPORT_WORDS = {
    "CONNECT_FAILED": "cannot connect",
    "CONNECTION_CLOSED": "the connection closed before the answer",
    "TOO_MANY_REQUESTS": "too many requests waiting on the connection",
}


def transport_reason(exc: BaseException | None) -> str:
    """Why an SDK request got no answer, in an operator's words, from the error's fields: "cannot connect", "no
    answer within 5.0s"; the error's own text for anything else, "no answer" for none."""
    sdk = sys.modules.get("client.errors")
    if exc is None:
        return "no answer"
    if sdk is not None and isinstance(exc, sdk.RequestTimeout):
        return f"no answer within {exc.timeout_s:.1f}s"
    if sdk is not None and isinstance(exc, sdk.BrokerUnreachableError):
        words = TRANSPORT_WORDS.get(exc.status, exc.details or exc.status)
        rpc = sys.modules.get("ctl.rpc")
        if exc.status == "CONNECTION_CLOSED" and rpc is not None and rpc.tls() is None:
            words += "; a port with tls.server.mode=enforcing closes plaintext: connect with --tls"
        return words
    return exc.message if isinstance(exc, PyrmqError) else str(exc) or "no answer"


def describe(exc: BaseException) -> str | None:
    """One line for a known exception, None for anything else."""
    translated = _from_sdk(exc)
    if translated is not None:
        return str(translated)
    if isinstance(exc, PyrmqError):
        return str(exc)
    docker_errors = sys.modules.get("docker.errors")
    if docker_errors is not None and isinstance(exc, docker_errors.DockerException):
        explanation = getattr(exc, "explanation", None) or str(exc)
        if isinstance(exc, docker_errors.APIError):
            return f"the Docker engine refused: {explanation}; check the container names with `docker ps`"
        return f"no Docker engine reachable ({explanation}); {DOCKER_HINT}"
    if isinstance(exc, OSError):
        return f"{exc}; check the path or address and your permissions"
    return None
