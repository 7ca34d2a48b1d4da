"""The listen ports of a server's conf, checked before the server touches anything else.

Each port is bound once and released (``check_ports``), so a port another process holds fails at start, before a
store is locked or recovered, with an error that names the conf key to change: an operator who starts a second
broker on a host reads "grpcServerPort 8081 is in use ... set grpcServerPort", not a bare "address already in use".
Every clash is reported in one error, and two keys naming the same port are a clash too. A port that is derived
from another key (``fastListenPort`` = ``listenPort - 2``) says so, because the key to change may be the other one.

The check and the real bind are separate: a process that takes a port in between still fails the real bind, with
that server's own message. Port 0 ("any free port") is bound too and the port picked is returned, so the caller
can listen there.

The nameserver, the controller and the broker share RocketMQ 5's metrics exporter keys (``metricsExporterType``,
``metricsPromExporterPort``, ``metricsPromExporterHost``): ``check_exporter_type`` and ``exporter_ports`` are the
one reading of them all three configs use.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ANY_HOST = "0.0.0.0"
# The nameserver's default listenPort, and where a tool looks when nobody names a nameserver (mqctl, the SDK's
# examples, the Spark connector): that port on this host. One definition for namesrv/config.py and every client.
NAMESRV_DEFAULT_PORT = 9876
DEFAULT_NAMESRV_ADDR = f"127.0.0.1:{NAMESRV_DEFAULT_PORT}"
METRICS_EXPORTER_TYPES = ("DISABLE", "PROM")  # RocketMQ 5's names; its OTLP_GRPC and LOG exporters are not here


@dataclass(frozen=True, slots=True)
class ListenPort:
    """One port a server will bind: the conf ``key`` that sets it, and what to say beyond "set <key>"."""

    key: str
    port: int
    host: str = ANY_HOST
    derived: str = ""  # how the default was computed, e.g. "listenPort - 2"; empty when the conf set it
    hint: str = ""  # more ways out, e.g. "0 turns the fast port off"


class PortInUseError(OSError):
    """Ports of the conf are taken (or repeated); ``keys`` are the conf keys to change."""

    def __init__(self, message: str, keys: list[str]) -> None:
        super().__init__(message)
        self.errno = errno.EADDRINUSE
        self.keys = keys


def _describe(p: ListenPort) -> str:
    via = f" ({p.derived})" if p.derived else ""
    return f"{p.key} {p.port}{via}"


def _where(p: ListenPort) -> str:
    host = p.host or ANY_HOST
    return f"[{host}]:{p.port}" if ":" in host else f"{host}:{p.port}"


def _advice(p: ListenPort, source: str) -> str:
    where = f" in {source}" if source else ""
    hint = f" ({p.hint})" if p.hint else ""
    return f"set {p.key} to a free port{where}{hint}"


def _try_bind(host: str, port: int) -> tuple[int, str]:
    """(bound port, "") or (0, why not)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free for a server
        try:
            s.bind((host or ANY_HOST, port))
        except OSError as exc:
            return 0, exc.strerror or str(exc)
        return s.getsockname()[1], ""


def clashes(ports: Iterable[ListenPort]) -> list[tuple[ListenPort, ListenPort]]:
    """(first, repeat) for every port that a later key names again (0, "any free port", never clashes): a conf
    loader refuses these before anything binds."""
    owner: dict[int, ListenPort] = {}
    found: list[tuple[ListenPort, ListenPort]] = []
    for p in ports:
        if p.port and p.port in owner:
            found.append((owner[p.port], p))
        elif p.port:
            owner[p.port] = p
    return found


def describe_clash(first: ListenPort, repeat: ListenPort, source: str = "") -> str:
    """One line: which two keys name one port, and what to change."""
    return f"{_describe(repeat)} is also {_describe(first)}; {_advice(repeat, source)} (or {first.key})"


def check_ports(ports: Iterable[ListenPort], *, server: str, source: str = "") -> Mapping[str, int]:
    """Bind each port once; ``{key: bound port}`` (a 0 resolved to the port picked) or PortInUseError naming every
    key to change. ``server`` names the process in the message ("broker broker-a"); ``source`` is its conf file."""
    ports = list(ports)
    problems: list[str] = []
    keys: list[str] = []
    for first, p in clashes(ports):
        problems.append(f"{_where(p)}: {describe_clash(first, p, source)}")
        keys.append(p.key)
    bound: dict[str, int] = {}
    for p in ports:
        if p.key in keys:
            continue
        port, why = _try_bind(p.host, p.port)
        if why:
            problems.append(f"{_where(p)}: {_describe(p)} is in use ({why}); {_advice(p, source)}")
            keys.append(p.key)
        else:
            bound[p.key] = port
    if problems:
        head = f"{server} cannot listen on " if len(problems) == 1 else f"{server} cannot listen on {len(problems)} ports:\n  "
        raise PortInUseError(head + "\n  ".join(problems), keys)
    return bound


def check_exporter_type(exporter_type: str, note: str = "") -> None:
    """ValueError starting with the key (the loader prints "<file>: <key>: <problem>") unless ``exporter_type`` is
    one of METRICS_EXPORTER_TYPES; ``note`` is appended to the message as is."""
    if exporter_type not in METRICS_EXPORTER_TYPES:
        choices = ", ".join(METRICS_EXPORTER_TYPES)
        raise ValueError(f"metricsExporterType: {exporter_type!r} is not one of {choices}{note}")


def exporter_ports(exporter_type: str, port: int, host: str) -> list[ListenPort]:
    """The exporter's port as a server's ``listen_ports`` lists it: none unless ``metricsExporterType=PROM`` and
    ``metricsPromExporterPort`` is not 0 (0 is picked at bind, so it cannot clash); an empty host is every
    interface."""
    if exporter_type != "PROM" or not port:
        return []
    return [ListenPort("metricsPromExporterPort", port, host=host or ANY_HOST,
                       hint="0 picks one; metricsExporterType=DISABLE turns the exporter off")]
