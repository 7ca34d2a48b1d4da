"""SQL92 property filters on the pull path, in one process without sockets: the broker's event-loop CPU for pulling
one queue end to end through ``broker.processors.pull`` (request decode, filter, store read, response encode),
with a SQL92 subscription against tag subscriptions, interleaved in the same run.

Why (issue 24 item 4): a SQL92 filter must cost no Python per message that does not match beyond reading its
properties. The queue holds 1 KiB messages with six properties (TAGS, KEYS, UNIQ_KEY and three user properties);
one in ten has ``TAGS=hit`` and ``kind=hit``. Subscriptions:

- ``tag *``: everything (the reference delivery cost);
- ``tag hit`` / ``sql kind = 'hit' AND n >= 0``: the same 10 %, by tag hash code vs by properties;
- ``tag none`` / ``sql kind = 'never'``: nothing matches, so the CPU per scanned message is the cost of one message
  that does not match (the SQL figure is the properties read plus one evaluation).

Reported: messages delivered per CPU second, messages scanned per CPU second and µs of CPU per scanned message;
then the two ways to decide one record: the full properties parse against the lookup of only the names the
expression reads (the path the broker uses).
``python -m bench.filter_bench [--messages N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from bench.broker_path_bench import broker_context
from bench.report import median_of, print_table, write_json

BODY = 1024
MAX_NUMS = 32
TOPIC = "FilterBench"
SUBSCRIPTIONS = [
    ("tag *", "TAG", "*"),
    ("tag hit (10 %)", "TAG", "hit"),
    ("sql 10 %", "SQL92", "kind = 'hit' AND n >= 0"),
    ("tag none", "TAG", "none"),
    ("sql none", "SQL92", "kind = 'never'"),
]


async def _fill(ctx, messages: int) -> None:
    from broker.store.types import MessageDraft

    batch = []
    for i in range(messages):
        hit = i % 10 == 0
        props = {"TAGS": "hit" if hit else "miss", "KEYS": f"order-{i}", "UNIQ_KEY": f"{i:032X}",
                 "kind": "hit" if hit else "miss", "n": str(i), "region": "eu-west-1"}
        batch.append(MessageDraft(b"y" * BODY, props))
        if len(batch) == 256:
            await ctx.store.put_messages(TOPIC, 0, batch)
            batch = []
    if batch:
        await ctx.store.put_messages(TOPIC, 0, batch)


def _pass(ctx, expression_type: str, expression: str, messages: int) -> tuple[float, int, int]:
    """One pull of the whole queue: (CPU seconds, pulls, messages delivered)."""
    from broker.processors import pull
    from remoting.codes import RequestCode
    from remoting.connection import Connection
    from remoting.frame_codec import RemotingCommand, decode, encode, encode_bytes
    from remoting.message_headers import PULL_SUBSCRIPTION, PullHeader

    conn = Connection(None)
    conn.peer = "127.0.0.1:50000"
    offset = pulls = delivered = 0
    cpu = 0.0
    while offset < messages:
        header = PullHeader(consumer_group="g-bench", topic=TOPIC, queue_id=0, queue_offset=offset,
                            max_msg_nums=MAX_NUMS, sys_flag=PULL_SUBSCRIPTION, subscription=expression,
                            expression_type=expression_type)
        frame = encode_bytes(RemotingCommand(RequestCode.PULL_MESSAGE, ext=header.to_ext()))[4:]
        cpu0 = time.thread_time()
        response = pull.serve_pull(ctx, conn, decode(frame))
        encode(response)
        cpu += time.thread_time() - cpu0  # the broker's part: the bench's own counting below is not
        assert response.code in (0, 20), response.remark  # found, or PULL_RETRY_IMMEDIATELY: nothing matched
        offset = int(response.ext["nextBeginOffset"])
        delivered += _count(response) if response.code == 0 else 0
        pulls += 1
    return cpu, pulls, delivered


def _count(response) -> int:
    from remoting.message_codec import iter_records

    return sum(1 for _ in iter_records(response.body_bytes(), check_crc=False))


def _evaluation_us(raw: bytes, expression: str, repeat: int = 20_000) -> dict[str, float]:
    """µs to decide one stored record (in a mapping, as the read path sees it): the full properties parse + the
    filter, against the lookup of only the names the expression reads (``PropertyFilter.match_record``)."""
    import mmap

    from broker.filter.consumer_filters import PropertyFilter, record_properties
    from broker.filter.sql92 import compile_filter

    mm = mmap.mmap(-1, len(raw))
    mm[:] = raw
    sql = compile_filter(expression)
    fast = PropertyFilter(sql)
    out: dict[str, list[float]] = {"full parse": [], "lookup": []}
    for _ in range(5):
        for name, fn in (("full parse", lambda: sql.matches(record_properties(mm, 0, len(raw)))),
                         ("lookup", lambda: fast.match_record(mm, 0, len(raw)))):
            cpu0 = time.thread_time()
            for _ in range(repeat):
                fn()
            out[name].append((time.thread_time() - cpu0) / repeat * 1e6)
    return {name: min(v) for name, v in out.items()}


async def run(messages: int, runs: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="filter-bench-"))
    try:
        # the default transfer limits of broker_context (128 messages, 1 MiB) do not bind a 32-message pull
        ctx = await broker_context(root, broker_conf={"enable_property_filter": True}, metrics=False)
        ctx.topics.create_if_absent(TOPIC, 1)
        await _fill(ctx, messages)
        samples: dict[str, list[tuple[float, int, int]]] = {name: [] for name, _, _ in SUBSCRIPTIONS}
        for _ in range(runs):
            for name, kind, expression in SUBSCRIPTIONS:
                samples[name].append(_pass(ctx, kind, expression, messages))
        evaluation = _evaluation_us(ctx.store.read_record(ctx.store.min_phy_offset + 0) or b"", "kind = 'never'")
        await ctx.store.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = {}
    for name, kind, expression in SUBSCRIPTIONS:
        cpu = median_of([s[0] for s in samples[name]])
        delivered = samples[name][0][2]
        rows[name] = {
            "type": kind,
            "expression": expression,
            "delivered": delivered,
            "pulls": samples[name][0][1],
            "cpu_s": cpu,
            "delivered_per_cpu_s": delivered / cpu if cpu else float("nan"),
            "scanned_per_cpu_s": messages / cpu if cpu else float("nan"),
            "us_per_scanned_message": cpu / messages * 1e6,
        }
    return {"messages": messages, "body_bytes": BODY, "max_msg_nums": MAX_NUMS, "runs": runs, "results": rows,
            "sql_vs_tag_10pct_throughput": rows["sql 10 %"]["delivered_per_cpu_s"]
            / rows["tag hit (10 %)"]["delivered_per_cpu_s"],
            "us_per_non_matching_message": {"sql": rows["sql none"]["us_per_scanned_message"],
                                            "tag": rows["tag none"]["us_per_scanned_message"]},
            "evaluation_us_per_record": evaluation,
            "samples_cpu_s": {k: [s[0] for s in v] for k, v in samples.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.filter_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=50_000, help="messages in the queue")
    ap.add_argument("--runs", type=int, default=3, help="passes per subscription (median CPU reported)")
    args = ap.parse_args(argv)
    result = asyncio.run(run(args.messages, args.runs))
    print_table(
        f"PULL_MESSAGE over {args.messages:,} x {BODY} B messages, maxMsgNums {MAX_NUMS}: loop-thread CPU",
        ["subscription", "delivered", "pulls", "delivered/CPU s", "scanned/CPU s", "µs/scanned msg"],
        [[k, v["delivered"], v["pulls"], v["delivered_per_cpu_s"], v["scanned_per_cpu_s"],
          v["us_per_scanned_message"]] for k, v in result["results"].items()],
    )
    print(f"SQL92 10 % vs tag 10 %: {result['sql_vs_tag_10pct_throughput']:.2f}x the delivered messages per CPU s;"
          f" a message that does not match costs {result['us_per_non_matching_message']['sql']:.2f} µs with SQL92,"
          f" {result['us_per_non_matching_message']['tag']:.2f} µs with a tag", flush=True)
    print_table("one record that does not match (kind = 'never'), decided in the mapping: CPU (min of 5)",
                ["path", "µs/record"], [[k, v] for k, v in result["evaluation_us_per_record"].items()])
    write_json("filter_bench", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
