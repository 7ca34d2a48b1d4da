"""TLS against plain TCP, in one run: SDK produce msg/s to one broker whose nameserver and listen port are in
``tls.server.mode=permissive`` (so the same processes serve both), alternating a plain producer and a TLS one
(``Producer(..., tls=True, tls_ca=...)``) for ``--runs`` rounds each; the figure is the ratio of the medians
(issue 25's goal: TLS >= 0.7 of plain), the median of the round-by-round ratios, and the CPU per message of the
broker and of the producer (steadier than rates on a busy machine). Also the handshakes a second the nameserver completes (a new connection
with a TLS handshake each, sequential). Noisy on a shared 2-core machine: trust the ratio more than the rates.

``python -m bench.tls_bench [--seconds S] [--runs N] [--senders N] [--body BYTES]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from bench.report import median_of, print_table, write_json

TOPIC = "TlsBenchTopic"


async def produce(ns_addr: str, tls: bool, ca: str, seconds: float, senders: int, body: bytes,
                  broker_pid: int) -> tuple[float, float, float]:
    """(msg/s, broker CPU µs per message, this client's CPU µs per message) of one round."""
    from bench.cpu import cpu_s
    from client import Message, Producer

    async with Producer(f"tls-bench-{'on' if tls else 'off'}", ns_addr, tls=tls, tls_ca=ca if tls else "") as p:
        await p.send(Message(TOPIC, body))  # route lookup and connection (and handshake) outside the window
        sent = 0
        stop_at = time.perf_counter() + seconds

        async def sender() -> None:
            nonlocal sent
            while time.perf_counter() < stop_at:
                await p.send(Message(TOPIC, body))
                sent += 1

        b0, c0, t0 = cpu_s(broker_pid), cpu_s(), time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        elapsed = time.perf_counter() - t0
        b1, c1 = cpu_s(broker_pid), cpu_s()
        return sent / elapsed, (b1 - b0) / sent * 1e6, (c1 - c0) / sent * 1e6


async def handshakes_per_s(ns_addr: str, ca: str, count: int) -> float:
    from remoting.client import RemotingClient
    from remoting.codes import RequestCode
    from remoting.frame_codec import RemotingCommand
    from remoting.tls import client_context

    context = client_context(trust=ca)
    t0 = time.perf_counter()
    for _ in range(count):
        client = RemotingClient(ssl=context)
        await client.invoke(ns_addr, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO), 5)
        await client.close()
    return count / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--handshakes", type=int, default=200)
    args = parser.parse_args()

    from client import AdminClient
    from common import event_loop
    from harness.procs import Broker, Namesrv
    from harness.tls_certs import make_certs

    body = os.urandom(args.body)
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as tmp:
        root = Path(tmp)
        certs = make_certs(root / "certs", ["server"])
        tls_conf = certs.server_conf("server", "permissive")
        with Namesrv(root / "ns", **tls_conf) as ns, Broker(root / "b", name="broker-tls-bench",
                                                             namesrv_addr=ns.addr, **tls_conf) as broker:

            async def run() -> dict:
                async with AdminClient(ns.addr) as admin:
                    await admin.update_topic(broker.addr, TOPIC, read_queue_nums=4, write_queue_nums=4)
                await produce(ns.addr, False, "", 1.0, args.senders, body, broker.pid)  # warm-up, unmeasured
                rounds: dict[str, list[tuple[float, float, float]]] = {"off": [], "on": []}
                for _ in range(args.runs):
                    for name in ("off", "on"):
                        rounds[name].append(await produce(ns.addr, name == "on", certs.ca, args.seconds,
                                                          args.senders, body, broker.pid))
                hs = await handshakes_per_s(ns.addr, certs.ca, args.handshakes)
                return {"rounds": rounds, "handshakes_per_s": hs}

            out = event_loop.run(run())
    rounds = out["rounds"]
    rate = {k: [r[0] for r in v] for k, v in rounds.items()}
    broker_us = {k: median_of([r[1] for r in v]) for k, v in rounds.items()}
    client_us = {k: median_of([r[2] for r in v]) for k, v in rounds.items()}
    off, on = median_of(rate["off"]), median_of(rate["on"])
    ratio = on / off if off else 0.0
    pair_ratio = median_of([b / a for a, b in zip(rate["off"], rate["on"], strict=True) if a])  # round by round
    print_table("SDK produce, TLS against plain TCP (same broker, permissive ports, alternating rounds)",
                ["variant", "msg/s (median)", "broker CPU µs/msg", "client CPU µs/msg", "runs (msg/s)"],
                [["plain", f"{off:,.0f}", f"{broker_us['off']:.1f}", f"{client_us['off']:.1f}",
                  ", ".join(f"{r:,.0f}" for r in rate["off"])],
                 ["TLS", f"{on:,.0f}", f"{broker_us['on']:.1f}", f"{client_us['on']:.1f}",
                  ", ".join(f"{r:,.0f}" for r in rate["on"])],
                 ["TLS / plain", f"{ratio:.2f} (pairs {pair_ratio:.2f})",
                  f"{broker_us['off'] / broker_us['on']:.2f}" if broker_us["on"] else "",
                  f"{client_us['off'] / client_us['on']:.2f}" if client_us["on"] else "", "goal >= 0.7"],
                 ["TLS handshakes/s (sequential, new connection each)", f"{out['handshakes_per_s']:,.0f}", "", "",
                  ""]])
    write_json("tls_bench", {
        "seconds": args.seconds, "runs": args.runs, "senders": args.senders, "body_bytes": args.body,
        "msg_per_s": {k: [round(r) for r in v] for k, v in rate.items()},
        "median_msg_per_s": {"off": round(off), "on": round(on)}, "ratio_tls_over_plain": round(ratio, 3),
        "median_of_round_ratios": round(pair_ratio, 3),
        "broker_cpu_us_per_msg": {k: round(v, 2) for k, v in broker_us.items()},
        "client_cpu_us_per_msg": {k: round(v, 2) for k, v in client_us.items()},
        "handshakes_per_s": round(out["handshakes_per_s"]),
        "load_average_1m": round(os.getloadavg()[0], 1),
    })


if __name__ == "__main__":
    main()
