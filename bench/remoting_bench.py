"""The remoting layer alone: server CPU per request, 64 concurrent callers on one connection.

Why: the issue that made remoting pyrmq's native protocol measured a JSON-header frame at 25-32 µs of server CPU
per 1 KiB request and 53-59 µs per 32 KiB one, against 188-253 µs for a grpc.aio stream message. This checks what
``remoting/`` itself costs, apart from any broker work: an echo-size-only processor (answers with an empty body,
as a send does) and a body-returning one (answers the request's size, as a pull does).

The server runs in its own process (uvloop unless PYRMQ_EVENT_LOOP=asyncio); its CPU is read from /proc before and
after the measured window. ``python -m bench.remoting_bench [--seconds S] [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time

from bench.cpu import cpu_s
from bench.report import median_of, print_table, write_json

CALLERS = 64
SIZES = (1024, 32 * 1024)
ACK, ECHO = 310, 11


def _serve(port_q: mp.Queue, stop: mp.Event) -> None:
    from common.event_loop import run
    from remoting.frame_codec import response_to
    from remoting.server import RemotingServer

    async def main() -> None:
        srv = RemotingServer("bench", "127.0.0.1", 0)
        srv.register(ACK, lambda conn, req: response_to(req, 0, ext={"queueOffset": "1", "msgId": "X"}))
        srv.register(ECHO, lambda conn, req: response_to(req, 0, body=req.body))
        port_q.put(await srv.start())
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await srv.stop()

    run(main())


async def _drive(port: int, code: int, size: int, seconds: float, server_pid: int) -> dict[str, float]:
    from remoting.client import RemotingClient
    from remoting.frame_codec import RemotingCommand

    client = RemotingClient()
    addr = f"127.0.0.1:{port}"
    body = b"x" * size
    ext = {"b": "BenchTopic", "e": "0", "a": "bench"}
    done = 0
    stop_at = 0.0

    async def caller() -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            await client.invoke(addr, RemotingCommand(code, ext=ext, body=body), 10)
            done += 1

    stop_at = time.monotonic() + 1.0  # warm-up
    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    done = 0
    cpu0, t0 = cpu_s(server_pid), time.monotonic()
    stop_at = t0 + seconds
    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    elapsed, cpu = time.monotonic() - t0, cpu_s(server_pid) - cpu0
    await client.close()
    return {"requests_per_s": done / elapsed, "server_cpu_us_per_request": cpu / done * 1e6}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    from common.event_loop import run

    ctx = mp.get_context("spawn")
    port_q, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(port_q, stop), daemon=True)
    proc.start()
    try:
        port = port_q.get(timeout=20)
        samples: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(args.runs):
            for name, code in (("ack", ACK), ("echo", ECHO)):
                for size in SIZES:
                    r = run(_drive(port, code, size, args.seconds, proc.pid))
                    samples.setdefault((name, size), []).append(r)
    finally:
        stop.set()
        proc.join(10)
    rows, results = [], []
    for (name, size), runs in samples.items():
        rps = median_of([r["requests_per_s"] for r in runs])
        cpu = median_of([r["server_cpu_us_per_request"] for r in runs])
        rows.append([name, size, rps, cpu])
        results.append(
            {
                "answer": name,
                "request_bytes": size,
                "requests_per_s": rps,
                "server_cpu_us_per_request": cpu,
                "runs": runs,
            }
        )
    print_table(
        f"remoting layer, {CALLERS} callers on one connection (medians of {args.runs})",
        ["answer", "request B", "req/s", "server CPU µs/req"],
        rows,
    )
    write_json("remoting_bench", {"callers": CALLERS, "seconds": args.seconds, "results": results})


if __name__ == "__main__":
    main()
