"""The broker's per-request cost of single-message sends, counted in instructions (issue 26 goal 2).

The shared 2-core machine makes CPU timings of one path noisy; callgrind's instruction count is not. This runs a
real ``RemotingServer`` with the send processor on loopback in this process, over a ``MessageStore`` (no slave),
and drives it with ``--inflight`` SEND_MESSAGE_V2 (JSON header) or SEND_MESSAGE (ROCKETMQ binary header, full
names) requests of one 1 KiB message each per round trip, pre-encoded, read back by their length fields only.

``--callgrind`` runs itself twice under ``valgrind --tool=callgrind`` (``--requests`` and twice that) and reports
the difference per request: start-up, warmup and teardown cancel out, what is left is a request's instructions
(the server's, plus the small fixed cost of the driver's socket calls). ``--tree PATH`` measures another checkout
(the same harness, that tree's broker). Never passes or fails.

    python -m bench.single_send_path --callgrind --requests 2000 [--header binary] [--tree /tmp/pyrmq-base]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOPIC = "SingleTopic"
QUEUES = 8
BODY = 1024
_LEN = struct.Struct(">i")


def _frames(binary: bool, count: int, start: int) -> list[bytes]:
    from remoting.codes import RequestCode
    from remoting.frame_codec import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, RemotingCommand, encode_bytes

    out = []
    for seq in range(start, start + count):
        props = f"UNIQ_KEY\x01{seq:032X}\x02WAIT\x01true\x02TAGS\x01t"
        if binary:  # the Go client: code 10, full names
            ext = {"producerGroup": "pg", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                   "queueId": str(seq % QUEUES), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
                   "properties": props, "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
            code, kind = RequestCode.SEND_MESSAGE, SERIALIZE_ROCKETMQ
        else:  # Java's client: code 310, V2 keys
            ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(seq % QUEUES), "f": "0",
                   "g": "1700000000000", "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}
            code, kind = RequestCode.SEND_MESSAGE_V2, SERIALIZE_JSON
        cmd = RemotingCommand(code, opaque=seq, ext=ext, body=b"x" * BODY, serialize_type=kind)
        out.append(encode_bytes(cmd))
    return out


async def _drive(sock: socket.socket, frames: list[bytes], inflight: int) -> None:
    loop = asyncio.get_running_loop()
    buf = bytearray()
    for i in range(0, len(frames), inflight):
        chunk = frames[i : i + inflight]
        await loop.sock_sendall(sock, b"".join(chunk))
        answers = 0
        while answers < len(chunk):
            data = await loop.sock_recv(sock, 1 << 20)
            if not data:
                raise RuntimeError("the broker closed the connection")
            buf += data
            while len(buf) >= 4:
                n = _LEN.unpack_from(buf)[0] + 4
                if len(buf) < n:
                    break
                if answers == 0 and i == 0:
                    _check(bytes(buf[4:n]))
                del buf[:n]
                answers += 1


def _check(frame: bytes) -> None:
    from remoting.frame_codec import decode

    cmd = decode(frame)
    if cmd.code != 0:
        raise RuntimeError(f"the send was refused: {cmd.code} {cmd.remark}")


async def run(requests: int, binary: bool, inflight: int, index: bool = True) -> None:
    from bench import broker_path_bench

    # a tree measured with --tree may predate the public name; its own private one is all it has
    broker_context = getattr(broker_path_bench, "broker_context", None) or getattr(broker_path_bench, "_context")
    from broker.processors import send
    from remoting.server import RemotingServer

    root = Path(tempfile.mkdtemp(prefix="single-path-"))
    try:
        ctx = await broker_context(root, **({} if index else {"message_index_enable": False}))
        ctx.topics.create_if_absent(TOPIC, QUEUES)
        server = RemotingServer("broker", "127.0.0.1", 0)
        send.register(server, ctx)
        port = await server.start()
        gc.freeze()  # as common.process does once a broker has started
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        frames = _frames(binary, 512, 0)  # encoded once: the driver's per-request work is a join and a send
        await _drive(sock, frames, inflight)  # warmup: every queue's files and caches
        await _drive(sock, [frames[i % len(frames)] for i in range(requests)], inflight)
        sock.close()
        await server.stop(grace_s=1.0)
        await ctx.store.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _callgrind(tree: Path, requests: int, header: str, inflight: int, index: bool) -> int:
    out = tempfile.mktemp(prefix="cg-", suffix=".out")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
           "bench.single_send_path", "--requests", str(requests), "--header", header, "--inflight", str(inflight)]
    if not index:
        cmd.append("--no-index")
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"callgrind run failed: {proc.stderr[-2000:]}")
    total = re.search(r"Collected : (\d+)", proc.stderr)
    os.unlink(out)
    return int(total.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.single_send_path", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--header", choices=("json", "binary"), default="json")
    ap.add_argument("--inflight", type=int, default=64, help="requests per round trip")
    ap.add_argument("--callgrind", action="store_true", help="instructions per request (two runs, the difference)")
    ap.add_argument("--no-index", action="store_true", help="messageIndexEnable=false (what the index costs)")
    ap.add_argument("--tree", default=str(HERE.parent), help="checkout to measure (with --callgrind)")
    args = ap.parse_args(argv)
    if not args.callgrind:
        from common.event_loop import run as run_loop

        run_loop(run(args.requests, args.header == "binary", args.inflight, not args.no_index))
        return 0
    tree = Path(args.tree).resolve()
    if not (tree / "bench" / "single_send_path.py").exists():  # an older tree: this harness, that tree's broker
        shutil.copy(HERE / "single_send_path.py", tree / "bench" / "single_send_path.py")
    small = _callgrind(tree, args.requests, args.header, args.inflight, not args.no_index)
    large = _callgrind(tree, 2 * args.requests, args.header, args.inflight, not args.no_index)
    per = (large - small) / args.requests
    print(f"{tree} {args.header}{' no index' if args.no_index else ''}: {per:,.0f} instructions per request ({args.requests} requests, {args.inflight} in flight)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
