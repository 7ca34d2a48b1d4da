"""The v2 SendMessage handler's own cost, in one process without sockets: what pyrmq adds to a call beyond
grpcio (``bench.rocketmq5_bench`` measures whole calls; ``bench.grpc_floor`` what grpcio alone costs).

Each call is what gRPC hands the servicer and takes back: the request's bytes parsed (``FromString``, which grpcio
calls in Python), ``broker.grpc_v2.send.send_message`` with the store's put path (a real MessageStore, index on),
and the answer serialized. Variants, interleaved, one run: ``alone`` (one call at a time, the official client's
``send``; nothing else runs between calls), ``served`` (as ``alone``, then three loop turns, in which the store's
background work for the append runs, the index above all, as it does between calls in the broker; the cost of
empty turns taken out), ``together`` (``--inflight`` calls started in one loop turn, as gRPC hands concurrent calls to the
loop), each ``grouped`` (``MessageStore.put_grouped``, as the endpoint runs: the puts of one loop pass share one
append per queue and one wait) and ``direct`` (``put_messages``, one append per call). Reports the event-loop
thread's CPU per call (``time.thread_time``) and store appends per call.

For instruction counts, which the shared machine does not blur: ``valgrind --tool=callgrind --callgrind-out-file=F
python -m bench.grpc_v2_handler_bench --variant together-grouped --calls N`` at two N, (Ir(N2) - Ir(N1)) /
(N2 - N1). ``--flush SYNC_FLUSH`` makes every put wait for its group commit, as a SYNC_MASTER's waits for its replica: the
case grouping is for. ``python -m bench.grpc_v2_handler_bench [--calls 6000] [--runs 3] [--flush F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from bench.report import median_of, print_table, write_json

VARIANTS = ("alone-direct", "alone-grouped", "together-direct", "together-grouped", "served-direct")
TURNS = 3  # loop turns after each call in ``served``: the store's background work of the append runs in them
TOPIC = "BenchV2Handler"


def _requests(count: int, seq: int) -> list[bytes]:
    from broker.grpc_v2.pb import definition_pb2 as pb
    from broker.grpc_v2.pb import service_pb2 as spb

    out = []
    for i in range(seq, seq + count):
        sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=pb.MessageType.NORMAL,
                                 body_encoding=pb.Encoding.IDENTITY, tag="t", keys=[f"k{i}"])
        out.append(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=TOPIC), body=b"x" * 128, system_properties=sp)]).SerializeToString())
    return out


async def _sample(ctx, variant: str, raw: list[bytes], inflight: int) -> tuple[float, float]:
    """(event-loop thread CPU µs per call, store appends per call)."""
    from broker.grpc_v2 import send
    from broker.grpc_v2.pb import service_pb2 as spb

    grouped = variant.endswith("grouped")
    appends0, puts0 = ctx.store.grouped_appends
    born = ("127.0.0.1", 50000)
    parse, bad = spb.SendMessageRequest.FromString, []

    async def call(data: bytes) -> None:
        answer = await send.send_message(ctx, parse(data), born, grouped=grouped)
        if answer.status.code != 20000:
            bad.append(answer.status.message)
        answer.SerializeToString()

    empty_s = 0.0
    if variant.startswith("served"):  # what the loop turns cost without a call, taken out below
        e0 = time.thread_time()
        for _ in raw:
            for _ in range(TURNS):
                await asyncio.sleep(0)
        empty_s = time.thread_time() - e0
    t0 = time.thread_time()
    if variant.startswith("served"):
        for data in raw:
            await call(data)
            for _ in range(TURNS):
                await asyncio.sleep(0)
    elif variant.startswith("alone"):
        for data in raw:
            await call(data)
    else:
        for i in range(0, len(raw), inflight):
            await asyncio.gather(*(call(d) for d in raw[i:i + inflight]))
    spent = time.thread_time() - t0 - empty_s
    if bad:
        raise RuntimeError(f"{len(bad)} sends failed, first: {bad[0]}")
    appends1, puts1 = ctx.store.grouped_appends
    if grouped and puts1 - puts0 != len(raw):
        raise RuntimeError(f"{puts1 - puts0} grouped puts for {len(raw)} calls: the variant measured something else")
    appends = appends1 - appends0 if grouped else len(raw)
    return spent / len(raw) * 1e6, appends / len(raw)


async def run(calls: int, runs: int, inflight: int, variants: tuple[str, ...], flush: str) -> dict:
    from bench.broker_path_bench import broker_context
    from broker.config import FlushDiskType

    root = Path(tempfile.mkdtemp(prefix="v2-handler-"))
    try:
        ctx = await broker_context(root, flush_disk_type=FlushDiskType[flush])
        ctx.topics.create_if_absent(TOPIC, 4)
        for variant in variants:  # warm: first appends create files
            await _sample(ctx, variant, _requests(200, 0), inflight)
        us: dict[str, list[float]] = {v: [] for v in variants}
        appends: dict[str, float] = {}
        seq = 1000
        for _ in range(runs):
            for variant in variants:
                raw = _requests(calls, seq)
                seq += calls
                cpu, appends[variant] = await _sample(ctx, variant, raw, inflight)
                us[variant].append(cpu)
        await ctx.store.stop()
        return {"us_per_call": {v: median_of(s) for v, s in us.items()}, "appends_per_call": appends,
                "samples": us}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=6000, help="SendMessage calls per sample")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=64, help="calls started together in the together variants")
    ap.add_argument("--variant", choices=VARIANTS, action="append", help="only these (default: all)")
    ap.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH",
                    help="SYNC_FLUSH: every put waits for its group commit, as a SYNC_MASTER's for its replica")
    args = ap.parse_args(argv)
    variants = tuple(args.variant or VARIANTS)
    from common import event_loop

    result = event_loop.run(run(args.calls, args.runs, args.inflight, variants, args.flush))
    print_table(f"v2 SendMessage handler in process ({args.flush}): {args.calls} calls per sample, median of {args.runs}"
                " (2 shared cores: noisy, compare the ratios)", ["variant", "us_per_call", "appends_per_call"],
                [[v, round(result["us_per_call"][v], 1), f'{result["appends_per_call"][v]:.3f}'] for v in variants])
    write_json(f"grpc_v2_handler_bench_{args.flush.lower()}", {"args": vars(args), **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
