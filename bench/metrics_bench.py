"""Metrics benchmark: what one /metrics scrape costs a broker with many topics, and how long it stalls the loop.

Issue 12 item 4 measured a broker with 2,000 one-message topics: /metrics grew from 30 KB to 6.4 MB and each scrape
blocked the event loop for up to 2.5 s, stalling sends and pulls. This bench builds the same shape in one process
(no broker, no network but the scrape's own loopback HTTP): a ``BrokerMetrics`` on its own registry fed one send,
one pull and one committed offset per topic (a consumer group per topic, so consumer lag has a series each), and
the real ``MetricsServer``. While a thread scrapes, a ticker task on the event loop sleeps 1 ms at a time and
records how late it wakes: the worst lateness during the scrapes is the stall a send or pull would have seen, and
the worst lateness over as long again without scrapes is the machine's own noise (other processes, the GIL of the
bench's client thread), for comparison.

Reported per topic count: body bytes, samples, scrape wall time (median and max of ``--scrapes``), the loop's
worst stall during the scrapes, and the loop's share of the scrape (snapshot time on the loop, where the server
reports it). Usage: ``python -m bench.metrics_bench [--topics 10 2000] [--scrapes 5]``. Writes
``bench/results/metrics_bench.json``. Never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import urllib.request

from bench.report import median_of, print_table, write_json
from broker.metrics import BrokerMetrics, StoreGauges
from common.metrics import new_registry
from common.metrics_server import MetricsServer


def build(topics: int) -> tuple[object, BrokerMetrics]:
    registry = new_registry()
    metrics = BrokerMetrics(registry, cluster="bench", broker_name="broker-a", broker_id=0, role="ASYNC_MASTER",
                            broker_addr="127.0.0.1:10911")
    offsets: dict[str, dict[int, int]] = {}
    for i in range(topics):
        topic = f"auto-topic-{i}"
        metrics.on_send(topic, 1, 100 + i % 1000, "PUT_OK")
        metrics.on_pull(topic, f"group-{i}", 1, 100 + i % 1000)
        offsets[f"{topic}@group-{i}"] = {i % 8: 0}
    now_ms = int(time.time() * 1000)
    metrics.set_providers(
        store=lambda: StoreGauges(10_000_000, 0, 10_000_000, 10_000_000),
        consumer_offsets=lambda: offsets,
        queue_max_offset=lambda topic, queue_id: 1,
        queue_store_timestamp=lambda topic, queue_id, offset: now_ms - 1000,
    )
    return registry, metrics


def fetch(url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as resp:
        body = resp.read()
    return time.perf_counter() - started, body


async def measure(topics: int, scrapes: int) -> dict[str, float | int]:
    registry, _metrics = build(topics)
    server = MetricsServer(registry, host="127.0.0.1", port=0)
    await server.start()
    worst_stall = 0.0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst_stall
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst_stall = max(worst_stall, time.perf_counter() - before - 0.001)

    try:
        await asyncio.to_thread(fetch, server.url)  # warm-up: first-scrape costs (imports, caches) are not measured
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        worst_stall = 0.0
        started = time.perf_counter()
        times, body = [], b""
        for _ in range(scrapes):
            elapsed, body = await asyncio.to_thread(fetch, server.url)
            times.append(elapsed)
        scraping_stall = worst_stall
        worst_stall = 0.0
        await asyncio.sleep(time.perf_counter() - started)  # as long again without scrapes: the machine's noise
        idle_stall = worst_stall
        stop.set()
        await tick
    finally:
        await server.stop()
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    loop_share = getattr(server, "last_snapshot_s", None)
    return {
        "topics": topics,
        "body_bytes": len(body),
        "samples": samples,
        "scrape_ms_median": median_of(times) * 1000,
        "scrape_ms_max": max(times) * 1000,
        "loop_stall_ms_max": scraping_stall * 1000,
        "idle_stall_ms_max": idle_stall * 1000,
        "loop_snapshot_ms": float("nan") if loop_share is None else loop_share * 1000,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[10, 2000])
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--label", default="", help="a note stored with the results (e.g. the commit measured)")
    args = parser.parse_args(argv)
    rows = [asyncio.run(measure(n, args.scrapes)) for n in args.topics]
    columns = list(rows[0])
    print_table("/metrics scrape with one-message topics", columns, [[r[c] for c in columns] for r in rows])
    write_json("metrics_bench", {"label": args.label, "scrapes": args.scrapes, "rows": rows})


if __name__ == "__main__":
    main()
