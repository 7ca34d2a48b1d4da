"""Container healthcheck: one real gRPC round trip to the server running as PID 1.

    python healthcheck.py namesrv   # NameServer.GetBrokerClusterInfo must answer code 0
    python healthcheck.py broker    # BrokerAdmin.GetBrokerRuntimeInfo must answer code 0

The address is ``$PYRMQ_HEALTHCHECK_ADDR`` if set, else ``127.0.0.1:<listenPort>`` with ``listenPort`` read
from the config file PID 1 was started with (``-c FILE``), else the kind's default port. Exit status 0 means
healthy, 1 unhealthy; the one line printed ends up in ``docker inspect`` (``.State.Health.Log``).
"""

from __future__ import annotations

import os
import re
import sys

DEFAULT_PORTS = {"namesrv": 9876, "broker": 10911}
TIMEOUT_S = float(os.environ.get("PYRMQ_HEALTHCHECK_TIMEOUT", "3"))


def _config_path(cmdline: list[str]) -> str | None:
    """The value of ``-c FILE``, ``-cFILE``, ``--config FILE`` or ``--config=FILE`` in PID 1's arguments."""
    for i, arg in enumerate(cmdline):
        if arg in ("-c", "--config") and i + 1 < len(cmdline):
            return cmdline[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg.startswith("-c") and not arg.startswith("--") and len(arg) > 2:
            return arg[2:]
    return None


def _listen_port(conf_path: str) -> int | None:
    try:
        with open(conf_path, encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r"^\s*listenPort\s*[=:]\s*(\d+)\s*$", line)
                if m:
                    return int(m.group(1))
    except OSError:
        pass
    return None


def target_addr(kind: str) -> str:
    explicit = os.environ.get("PYRMQ_HEALTHCHECK_ADDR")
    if explicit:
        return explicit
    port = None
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            cmdline = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
        conf = _config_path(cmdline)
        if conf:
            port = _listen_port(conf)
    except OSError:
        pass
    return f"127.0.0.1:{port or DEFAULT_PORTS[kind]}"


def check(kind: str, addr: str) -> tuple[bool, str]:
    import grpc

    from remoting.pb import admin_pb2, admin_pb2_grpc, namesrv_pb2, namesrv_pb2_grpc

    with grpc.insecure_channel(addr) as channel:
        try:
            if kind == "namesrv":
                resp = namesrv_pb2_grpc.NameServerStub(channel).GetBrokerClusterInfo(
                    namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=TIMEOUT_S
                )
                detail = f"{len(resp.broker_addr_table)} broker group(s)"
            else:
                resp = admin_pb2_grpc.BrokerAdminStub(channel).GetBrokerRuntimeInfo(
                    admin_pb2.Empty(), timeout=TIMEOUT_S
                )
                detail = ", ".join(f"{k}={resp.table[k]}" for k in ("brokerRole", "brokerName") if k in resp.table)
        except grpc.RpcError as exc:
            return False, f"{kind} at {addr}: {exc.code().name}: {exc.details()}"
    if resp.code != 0:
        return False, f"{kind} at {addr}: code {resp.code}: {resp.remark}"
    return True, f"{kind} at {addr}: ok {detail}".rstrip()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in DEFAULT_PORTS:
        print(f"usage: {argv[0]} namesrv|broker", file=sys.stderr)
        return 2
    kind = argv[1]
    addr = target_addr(kind)
    try:
        ok, message = check(kind, addr)
    except Exception as exc:  # noqa: BLE001 - an import error or a bug must show up as "unhealthy", with why
        ok, message = False, f"{kind} at {addr}: {type(exc).__name__}: {exc}"
    print(message)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
