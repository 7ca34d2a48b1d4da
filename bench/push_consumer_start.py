"""How long a PushConsumer subscribed to many topics takes to start consuming (bench.scaling's topics=1000 finding).

Real processes on 127.0.0.1: a nameserver and one master broker (harness.procs). ``--topics`` topics of
``--queues`` queues are created with the SDK's AdminClient, one message is sent to each topic, then one PushConsumer
of a new group (CONSUME_FROM_FIRST_OFFSET, subscribed to every topic) starts. From the call to ``start()``:

- ``start_returned_s``: ``start()`` returned (routes read, heartbeat sent, first rebalance done);
- ``first_delivery_s``: the listener got its first message;
- ``all_pulled_s``: every queue had a PULL_MESSAGE sent (``harness.request_tap``, which counts the consumer's
  requests by code as they pass to the real broker);
- ``all_topics_delivered_s``: the message of every topic reached the listener.

Also the requests sent by code up to ``all_pulled_s``, and the most QUERY_CONSUMER_OFFSET requests in flight at
once. Usage: ``python -m bench.push_consumer_start [--topics 1000] [--label after]``; each label's run is kept in
``bench/results/push_consumer_start.json`` beside the others (before/after a change). Never passes or fails.

What it showed (2026-11-29, results file): past about 1,000 queues the broker is the limit, not the client. The
broker serves at most 1,024 requests of one connection at once (remoting ``Limits.max_requests``) and a long poll
held by ``PullRequestHoldService`` counts as one, so once the consumer's one connection holds 1,024 polls the broker
stops reading it: every other request on it (offset lookups, commits, consumer lists, more pulls) waits for a hold
to end (up to 15 s) and times out at 5 s. RocketMQ's broker keeps held pulls out of its request pool, so a Java
consumer of 8,000 queues has 8,000 polls held on one channel. Since then a held pull is parked
(``Connection.parked``, up to ``Limits.max_parked`` per connection) and no longer counts: label ``parked``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.report import RESULTS_DIR, print_table, write_json
from client import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from harness.procs import Broker, Namesrv
from harness.request_tap import RequestTap
from harness.waiting import async_wait_until
from remoting.codes import RequestCode

NAME = "push_consumer_start"


async def bounded(n: int, coros) -> list:
    sem = asyncio.Semaphore(n)

    async def one(c):
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


async def measure(ns_addr: str, broker_addr: str, args) -> dict:
    stamp = int(time.time())
    topics = [f"Start_{stamp}_{i}" for i in range(args.topics)]
    t = time.monotonic()
    async with AdminClient(ns_addr) as admin:
        await bounded(8, (admin.update_topic(broker_addr, name, read_queue_nums=args.queues,
                                             write_queue_nums=args.queues) for name in topics))

        async def routed() -> bool:
            return all([len((await admin.topic_route(name)).subscribe_queues) == args.queues
                        for name in (topics[0], topics[-1])])

        await async_wait_until(routed, 120, "the nameserver to route the topics", 0.2)
    created_s = time.monotonic() - t
    async with Producer(f"P_{stamp}", ns_addr) as producer:
        await bounded(32, (producer.send(Message(name, name.encode())) for name in topics))

    delivered: dict[str, float] = {}
    first: list[float] = []

    async def listener(msgs) -> ConsumeStatus:
        now = time.monotonic()
        if not first:
            first.append(now)
        for m in msgs:
            delivered.setdefault(m.topic, now)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"G_{stamp}", ns_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    for name in topics:
        consumer.subscribe(name)
    consumer.register_message_listener(listener)
    tap = RequestTap().attach(consumer.remoting.client)
    n_queues = args.topics * args.queues
    out: dict = {"topics": args.topics, "queues": n_queues, "topics_created_s": round(created_s, 1)}
    t0 = time.monotonic()
    try:
        await consumer.start()
        out["start_returned_s"] = round(time.monotonic() - t0, 2)
        try:
            await async_wait_until(lambda: tap.pulled_queues("Start_") >= n_queues, args.limit_s,
                                   "every queue pulled", 0.05)
            out["all_pulled_s"] = round(max(tap.first_pull_at.values()) - t0, 2)
        except AssertionError:
            out["all_pulled_s"] = None
            out["pulled_queues_at_limit"] = tap.pulled_queues("Start_")
        out["requests_until_all_pulled"] = tap.by_name(tap.sent)
        out["max_in_flight"] = tap.by_name(tap.max_in_flight)
        try:
            await async_wait_until(lambda: len(delivered) >= args.topics, args.limit_s, "every topic delivered", 0.05)
            out["all_topics_delivered_s"] = round(max(delivered.values()) - t0, 2)
        except AssertionError:
            out["all_topics_delivered_s"] = None
            out["topics_delivered_at_limit"] = len(delivered)
        out["first_delivery_s"] = round(first[0] - t0, 2) if first else None
        out["max_query_offset_in_flight"] = tap.max_in_flight[RequestCode.QUERY_CONSUMER_OFFSET]
    finally:
        await consumer.stop()
    return out


async def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="push_start_", ignore_cleanup_errors=True) as tmp:
        work = Path(args.workdir or tmp)
        with Namesrv(work / "namesrv") as ns:
            with Broker(work / "broker", name="broker-start", namesrv_addr=ns.addr, role="SYNC_MASTER") as broker:
                return await measure(ns.addr, broker.addr, args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--limit-s", type=float, default=300.0, help="how long to wait for each milestone")
    ap.add_argument("--workdir", help="keep the servers' files and logs here (default: a temporary directory)")
    ap.add_argument("--label", default="run", help="the key of this run in the results file (e.g. before, after)")
    args = ap.parse_args(argv)
    result = asyncio.run(run(args))
    result["git_label"] = args.label
    cols = ["topics", "queues", "start_returned_s", "first_delivery_s", "all_pulled_s", "all_topics_delivered_s",
            "max_query_offset_in_flight"]
    print_table(f"push consumer start ({args.label})", cols,
                [[result.get(c) if result.get(c) is not None else "-" for c in cols]])
    print("requests until every queue was pulled:", result["requests_until_all_pulled"])
    path = RESULTS_DIR / f"{NAME}.json"
    runs = json.loads(path.read_text()).get("runs", {}) if path.exists() else {}
    runs[f"{args.label}_{args.topics}x{args.queues}"] = result
    write_json(NAME, {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
