"""Memory attacks against a nameserver and a broker (issue 22, items 3 and 9): what each costs the server while its
bounds hold, and what a normal client sees meanwhile.

Scenarios, each against the running processes of one scratch cluster (nameserver + broker, both with
``serverMaxHeldBytes`` = CAP and ``serverFrameTimeoutMillis`` = FRAME_TIMEOUT_MS, the broker with
``grpcMaxConnectionAgeMillis`` = GRPC_AGE_MS so the v2 floods end inside the run):

- ``partial frames``: 64 peers announce 8 MiB remoting frames, send 4 MiB and trickle a byte every 0.5 s (1 GiB
  unbounded), until the server has closed every one;
- ``unread answers``: 32 peers send requests and never read an answer, until the server stops reading them all;
- ``v2 rapid reset``: 4 HTTP/2 peers open and reset streams at once (CVE-2023-44487) until their GOAWAY;
- ``v2 partial messages``: 4 HTTP/2 peers x 8 streams announce 4 MiB messages, send 1 MiB, trickle, until GOAWAY.

Per scenario: peers, attack operations (frames, requests, reset streams), the server's peak RSS growth (sampled
every 50 ms from /proc), its CPU seconds, how long the attack lasted, the peers the server closed, and the p50/p99
of a probe request sent every 20 ms meanwhile (a route query to the nameserver, a send to the broker, QueryRoute on
v2). ``python -m bench.attack_memory``; about a minute.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import multiprocessing as mp
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from bench.cpu import cpu_s, settle
from bench.report import print_table, write_json
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from harness.h2_raw import RawH2
from harness.memory_attacks import MIB, PartialFrames, RssPeak, UnreadAnswers
from harness.procs import Broker, Namesrv
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from tests.integration.broker.rpc import BrokerClient, message

CAP = 64 * MIB
FRAME_TIMEOUT_MS = 3000
GRPC_AGE_MS = 5000
TOPIC = "AttackBenchTopic"
CLIENT_ID = (("x-mq-client-id", "bench@attack-memory"),)
PROBE_EVERY_S = 0.02
LIMIT_S = 15.0


async def _probe_until(done: Callable[[], bool], probe: Callable[[], Awaitable[bool]]) -> tuple[list[float], int]:
    """Probe every PROBE_EVERY_S until ``done()`` (or LIMIT_S); returns latencies (ms) and failed probes."""
    latencies, failed = [], 0
    deadline = time.monotonic() + LIMIT_S
    while not done() and time.monotonic() < deadline:
        t0 = time.perf_counter()
        try:
            ok = await asyncio.wait_for(probe(), 5)
        except Exception:  # noqa: BLE001 - a failed probe is a figure, not an error of the bench
            ok = False
        if ok:
            latencies.append((time.perf_counter() - t0) * 1000)
        else:
            failed += 1
        await asyncio.sleep(PROBE_EVERY_S)
    return latencies, failed


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _attack(kind: str, addr: str, out: mp.Queue) -> None:
    """One attack, run in a process of its own (its threads must not take the probe's interpreter lock), until
    the server has dealt with every peer or LIMIT_S; puts (peers, attack ops, peers the server closed)."""
    deadline = time.monotonic() + LIMIT_S
    if kind in ("partial frames", "unread answers"):
        if kind == "partial frames":
            attack = PartialFrames(addr, 64, frame=8 * MIB, sent=4 * MIB, trickle_s=0.5).start()
            done = lambda: attack.closed == attack.connections  # noqa: E731
        else:
            code = RequestCode.GET_ALL_TOPIC_CONFIG if addr.endswith("broker") else RequestCode.GET_ROUTEINFO_BY_TOPIC
            addr = addr.removesuffix("/broker")
            ext = {} if code == RequestCode.GET_ALL_TOPIC_CONFIG else None
            attack = UnreadAnswers(addr, 32, requests=20_000, code=code, ext=ext).start()
            done = attack.settled
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)
        attack.stop()
        if isinstance(attack, PartialFrames):
            out.put((attack.connections, attack.connections, attack.closed))
        else:
            out.put((attack.connections, attack.sent, attack.closed))
        return
    peers = [RawH2(addr) for _ in range(4)]
    ops = 0
    if kind == "v2 rapid reset":
        while not all(p.ended for p in peers) and time.monotonic() < deadline:
            for p in peers:
                if not p.ended and p.rapid_resets(1000):
                    ops += 1000
    else:
        streams = [(p, p.partial_message(4 * MIB, MIB)) for p in peers for _ in range(8)]
        ops = len(streams)
        while not all(p.ended for p in peers) and time.monotonic() < deadline:
            for p, stream in streams:
                p.trickle(stream)
            time.sleep(0.5)
    out.put((len(peers), ops, sum(p.ended for p in peers)))
    for p in peers:
        p.close()


async def _scenario(kind: str, target: str, addr: str, pid: int, probe: Callable[[], Awaitable[bool]]) -> dict:
    await settle(pid)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    rss = RssPeak(pid)
    cpu0, t0 = cpu_s(pid), time.monotonic()
    proc = ctx.Process(target=_attack, args=(kind, addr, out), daemon=True)
    proc.start()
    try:
        latencies, failed = await _probe_until(lambda: not proc.is_alive() or not out.empty(), probe)
        peers, ops, closed = out.get(timeout=30)
    finally:
        lasted = time.monotonic() - t0
        proc.join(30)
        rss.stop()
    return {"scenario": kind, "target": target, "peers": peers, "attack_ops": ops,
            "peak_rss_growth_mib": rss.growth / MIB, "cpu_s": cpu_s(pid) - cpu0, "lasted_s": lasted,
            "peers_closed": closed, "probe_p50_ms": statistics.median(latencies) if latencies else float("nan"),
            "probe_p99_ms": _pct(latencies, 0.99), "probes": len(latencies), "probes_failed": failed}


async def _run() -> list[dict]:
    results = []
    capped = {"serverMaxHeldBytes": CAP, "serverFrameTimeoutMillis": FRAME_TIMEOUT_MS}
    with tempfile.TemporaryDirectory(prefix="attack-memory-", ignore_cleanup_errors=True) as tmp, \
            Namesrv(Path(tmp) / "namesrv", **capped) as ns, \
            Broker(Path(tmp) / "broker", name="broker-bench", namesrv_addr=ns.addr, grpcMaxConnectionAgeMillis=GRPC_AGE_MS,
                   **capped) as broker:
        ns_client = RemotingClient()
        async with BrokerClient(broker.addr) as client:
            assert (await client.create_topic(TOPIC)).code == ResponseCode.SUCCESS

            async def route_probe() -> bool:
                cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": "TBW102"})
                return (await ns_client.invoke(ns.addr, cmd, 5)).code in (ResponseCode.SUCCESS,
                                                                           ResponseCode.TOPIC_NOT_EXIST)

            async def send_probe() -> bool:
                return (await client.send(TOPIC, 0, [message(b"probe")])).code == ResponseCode.SUCCESS

            channel = grpc.aio.insecure_channel(broker.grpc_addr)
            stub = sgrpc.MessagingServiceStub(channel)

            async def v2_probe() -> bool:
                answer = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)),
                                               metadata=CLIENT_ID, timeout=5)
                return answer.status.code == pb.Code.OK

            for target, addr, pid, probe in (("nameserver", ns.addr, ns.pid, route_probe),
                                             ("broker listen port", broker.addr, broker.pid, send_probe)):
                results.append(await _scenario("partial frames", target, addr, pid, probe))
                suffix = "/broker" if pid == broker.pid else ""
                results.append(await _scenario("unread answers", target, addr + suffix, pid, probe))
            for kind in ("v2 rapid reset", "v2 partial messages"):
                results.append(await _scenario(kind, "broker gRPC", broker.grpc_addr, broker.pid, v2_probe))
            await channel.close()
        await ns_client.close()
    return results


def main(argv: list[str] | None = None) -> None:
    from common.event_loop import run

    results = run(_run())
    print_table(
        f"memory attacks (serverMaxHeldBytes {CAP // MIB} MiB, serverFrameTimeoutMillis {FRAME_TIMEOUT_MS}, "
        f"grpcMaxConnectionAgeMillis {GRPC_AGE_MS}; probe every {PROBE_EVERY_S * 1000:.0f} ms)",
        ["scenario", "target", "peers", "attack ops", "peak RSS +MiB", "CPU s", "lasted s", "closed", "probe p50 ms",
         "probe p99 ms", "probes failed"],
        [[r["scenario"], r["target"], r["peers"], r["attack_ops"], r["peak_rss_growth_mib"], r["cpu_s"], r["lasted_s"],
          r["peers_closed"], r["probe_p50_ms"], r["probe_p99_ms"], r["probes_failed"]] for r in results],
    )
    write_json("attack_memory", {"cap_bytes": CAP, "frame_timeout_ms": FRAME_TIMEOUT_MS, "grpc_age_ms": GRPC_AGE_MS,
                                 "results": results})


if __name__ == "__main__":
    main()
