"""Container healthcheck: one real remoting round trip to the server running as PID 1.

    python healthcheck.py namesrv   # GET_BROKER_CLUSTER_INFO (106) must answer code 0 with a ClusterInfo body
    python healthcheck.py broker    # GET_BROKER_RUNTIME_INFO (28) must answer code 0 with a KVTable body

The address is ``$PYRMQ_HEALTHCHECK_ADDR`` if set, else ``127.0.0.1:<listenPort>`` with ``listenPort`` read
from the config file PID 1 was started with (``-c FILE``), else the kind's default port. Exit status 0 means
healthy, 1 unhealthy; the one line printed ends up in ``docker inspect`` (``.State.Health.Log``).

In the secure compose cluster (docker-compose.secure.yml) the ports want TLS and a signed request:
``$PYRMQ_HEALTHCHECK_TLS_CA`` names the CA to verify the server with (the check then speaks TLS), and
``$PYRMQ_HEALTHCHECK_CREDENTIALS`` a file of two lines, access key and secret key, to sign with (RocketMQ's
AccessKey/Signature extFields; the secret stays in the file and this process).

Why a blocking socket and not the SDK: this runs every 10 s in a fresh interpreter inside the image, so it imports
only the pure frame codec (``remoting.frame_codec``, ``remoting.fastjson``): no event loop, no grpc, no client.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time

DEFAULT_PORTS = {"namesrv": 9876, "broker": 10911}
REQUEST_CODES = {"namesrv": 106, "broker": 28}  # GET_BROKER_CLUSTER_INFO, GET_BROKER_RUNTIME_INFO
TIMEOUT_S = float(os.environ.get("PYRMQ_HEALTHCHECK_TIMEOUT", "3"))
HEALTHCHECK_OPAQUE = 1


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


def invoke(addr: str, code: int, timeout_s: float):
    """Send one request and read frames until its response; the response command. OSError/TimeoutError on
    transport failures, FrameError when the peer does not speak remoting."""
    from remoting.frame_codec import FrameDecoder, RemotingCommand, decode, encode_bytes

    host, _, port = addr.rpartition(":")
    deadline = time.monotonic() + timeout_s
    request = RemotingCommand(code, opaque=HEALTHCHECK_OPAQUE)
    credentials = os.environ.get("PYRMQ_HEALTHCHECK_CREDENTIALS")
    if credentials:
        from remoting.acl_signature import sign

        with open(credentials, encoding="utf-8") as fh:
            access_key, secret_key = (fh.readline().strip(), fh.readline().strip())
        request.ext = sign({}, b"", access_key, secret_key)
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as raw:
        sock = raw
        ca = os.environ.get("PYRMQ_HEALTHCHECK_TLS_CA")
        if ca:
            import ssl

            context = ssl.create_default_context(cafile=ca)
            sock = context.wrap_socket(raw, server_hostname=host.strip("[]"))
        sock.sendall(encode_bytes(request))
        frames = FrameDecoder()
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection without answering")
            for frame in frames.feed(data):
                cmd = decode(frame)
                if cmd.is_response and cmd.opaque == HEALTHCHECK_OPAQUE:
                    return cmd


def check(kind: str, addr: str) -> tuple[bool, str]:
    from remoting import fastjson

    try:
        resp = invoke(addr, REQUEST_CODES[kind], TIMEOUT_S)
    except TimeoutError:
        return False, f"{kind} at {addr}: no answer within {TIMEOUT_S:g} s"
    except OSError as exc:
        return False, f"{kind} at {addr}: {exc.strerror or exc}"
    if resp.code != 0:
        return False, f"{kind} at {addr}: code {resp.code}: {resp.remark}"
    body = fastjson.loads(resp.body_bytes()) if resp.body else {}
    if kind == "namesrv":
        detail = f"{len(body.get('brokerAddrTable') or {})} broker group(s)"
    else:
        table = body.get("table") or {}
        detail = ", ".join(f"{k}={table[k]}" for k in ("brokerRole", "brokerName") if k in table)
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
