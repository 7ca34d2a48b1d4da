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

``--sends`` (issue 22 item 7) measures what a producer sees instead, against a real broker process: sends to
``--send-topics`` topics make its page about 600 series; then one producer sends one message at a time for
``--seconds`` without scrapes, and again while another process scrapes /metrics every ``--scrape-intervals``
seconds (0: back to back). Reported: send p50/p99/max in each phase, series on the page, scrapes done, and from
the broker's own ``rocketmq_event_loop_lag_seconds`` (where it has it): probes in the phase, how many woke more
than 5 ms late, and the bucket bound of the latest (a stall of the broker's loop, apart from the client's noise).
Writes ``bench/results/metrics_bench_sends.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

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
    gc.freeze()  # as a server does once started (common.process.serve)
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


# The scraper process: GETs the URL every INTERVAL seconds (0: back to back) until stdin closes, then prints how
# many scrapes it did.
SCRAPER = """
import sys, threading, time, urllib.request
url, interval, done, count = sys.argv[1], float(sys.argv[2]), threading.Event(), 0
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
while not done.is_set():
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as resp:
        resp.read()
    count += 1
    done.wait(max(0.0, interval - (time.monotonic() - started)))
print(count)
"""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def send_phase(producer, topic: str, seconds: float) -> list[float]:
    from client import Message

    latencies = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        await producer.send(Message(topic, b"probe"))
        latencies.append(time.perf_counter() - started)
    return latencies


def loop_lag_buckets(url: str) -> dict[float, float]:
    """The broker's ``rocketmq_event_loop_lag_seconds`` cumulative buckets (upper bound -> probes); {} without."""
    from prometheus_client.parser import text_string_to_metric_families

    text = fetch(url)[1].decode()
    return {float(s.labels["le"]): s.value for family in text_string_to_metric_families(text)
            if family.name == "rocketmq_event_loop_lag_seconds"
            for s in family.samples if s.name.endswith("_bucket")}


def lag_summary(before: dict[float, float], after: dict[float, float]) -> dict:
    """Probes in the phase, how many woke more than 5 ms late, and the bucket bound of the latest one."""
    if not after:
        return {"probes": 0, "probes_late_5ms": 0, "loop_lag_max_ms_le": float("nan")}
    delta = {le: after[le] - before.get(le, 0) for le in after}
    total = delta[float("inf")]
    bounds = sorted(delta)
    worst = next((le for le in bounds if delta[le] >= total), float("inf"))
    return {"probes": int(total), "probes_late_5ms": int(total - delta.get(0.005, 0)),
            "loop_lag_max_ms_le": worst * 1000}


def phase_row(phase: str, latencies: list[float], series: int, scrapes: int, lag: dict) -> dict:
    return {
        "phase": phase,
        "sends": len(latencies),
        "send_ms_p50": percentile(latencies, 0.5) * 1000,
        "send_ms_p99": percentile(latencies, 0.99) * 1000,
        "send_ms_max": max(latencies) * 1000,
        "series": series,
        "scrapes": scrapes,
        **lag,
    }


async def measure_sends(topics: int, seconds: float, intervals: list[float]) -> list[dict]:
    from client import Message, Producer
    from harness.procs import scratch_broker

    with scratch_broker("pyrmq-metrics-bench-") as (_work, ns, broker):
        url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
        async with Producer("BenchMetricsProducer", ns.addr) as producer:
            for i in range(topics):
                await producer.send(Message(f"MetricsBenchTopic{i}", b"x" * (100 + 1000 * (i % 5))))
            probe = "MetricsBenchProbe"
            await producer.send(Message(probe, b"warm"))
            body = fetch(url)[1]
            series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            lag0 = loop_lag_buckets(url)
            latencies = await send_phase(producer, probe, seconds)
            lag1 = loop_lag_buckets(url)
            rows = [phase_row("no scrapes", latencies, series, 0, lag_summary(lag0, lag1))]
            env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
            for interval in intervals:
                lag0 = loop_lag_buckets(url)
                with subprocess.Popen([sys.executable, "-c", SCRAPER, url, str(interval)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=env) as scraper:
                    latencies = await send_phase(producer, probe, seconds)
                    out, _ = scraper.communicate("", timeout=60)
                lag1 = loop_lag_buckets(url)
                phase = f"a scrape every {interval * 1000:g} ms" if interval else "scrapes back to back"
                rows.append(phase_row(phase, latencies, series, int(out.strip() or 0), lag_summary(lag0, lag1)))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[10, 2000])
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--sends", action="store_true", help="send latency against a broker process while scraped")
    parser.add_argument("--send-topics", type=int, default=60, help="topics sent to first (60: about 600 series)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each send phase")
    parser.add_argument("--scrape-intervals", type=float, nargs="+", default=[0.1, 0.0],
                        help="seconds between scrapes of each scraping phase (0: back to back)")
    parser.add_argument("--label", default="", help="a note stored with the results (e.g. the commit measured)")
    args = parser.parse_args(argv)
    if args.sends:
        rows = asyncio.run(measure_sends(args.send_topics, args.seconds, args.scrape_intervals))
        columns = list(rows[0])
        print_table(f"sends during /metrics scrapes ({args.label or 'this tree'})", columns,
                    [[r[c] for c in columns] for r in rows])
        write_json("metrics_bench_sends", {"label": args.label, "seconds": args.seconds, "rows": rows})
        return
    rows = [asyncio.run(measure(n, args.scrapes)) for n in args.topics]
    columns = list(rows[0])
    print_table("/metrics scrape with one-message topics", columns, [[r[c] for c in columns] for r in rows])
    write_json("metrics_bench", {"label": args.label, "scrapes": args.scrapes, "rows": rows})


if __name__ == "__main__":
    main()
