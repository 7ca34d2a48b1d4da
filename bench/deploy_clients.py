"""The deploy bench's two applications, each a process of its own: a producer (``--senders`` coroutines, each
sending one message at a time, over ``--topics`` topics in turn) and a push consumer whose listener only counts
(``--groups`` consumer groups, each subscribed to every topic: fan-out).

``bench.deploy_bench`` runs this file by path with the tree under test on PYTHONPATH, so a tree needs no copy of it
and every pyrmq import here is that tree's: it uses only the public SDK (``client.Producer``,
``client.PushConsumer``, ``Message``, ``SendStatus``, ``client.AdminClient``) and imports nothing from bench/.

Talks to the driver in lines: JSON out (a ready line, one line per ``mark``, a last one after ``stop``), commands in
on stdin (``start``, ``mark``, ``stop``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":
    # Run by path: sys.path[0] is this file's folder; pyrmq comes from PYTHONPATH (the tree under test) alone.
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != HERE]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def run_loop(coro) -> None:
    try:
        from common import event_loop  # the loop pyrmq's own processes use (uvloop when installed)
    except ImportError:
        asyncio.run(coro)
        return
    event_loop.run(coro)


def status_name(result) -> str:
    """SEND_OK, FLUSH_SLAVE_TIMEOUT, ... of a SendResult (``status``, or RocketMQ's ``send_status``)."""
    status = getattr(result, "status", None) or result.send_status
    return getattr(status, "name", str(status))


def topics(a) -> list[str]:
    """``--topic`` itself, or ``<topic>_0`` ... ``<topic>_<n-1>`` with ``--topics n``: senders take them in turn."""
    return [a.topic] if a.topics == 1 else [f"{a.topic}_{i}" for i in range(a.topics)]


async def commands():
    """Lines from stdin, one at a time (a thread reads them: stdin is a pipe from the driver)."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        yield line.strip()


async def serve_producer(a) -> None:
    import client
    from client import Message, Producer

    names, body = topics(a), os.urandom(a.body // 2 + 1).hex().encode()[: a.body]
    topic = names[0]
    created = "auto"
    try:  # as mqadmin updateTopic -c would; failing that, the first sends create it (autoCreateTopicEnable)
        async with client.AdminClient(a.namesrv) as admin:
            for name in names:
                await admin.create_topic_on_cluster(name, read_queue_nums=a.queues, write_queue_nums=a.queues)
            deadline = time.monotonic() + 30 + len(names) / 10
            waiting = list(names)
            while waiting and time.monotonic() < deadline:
                try:
                    if (await admin.topic_route(waiting[-1])).publish_queues:
                        waiting.pop()
                        continue
                except Exception:  # noqa: BLE001, S110 - no route yet
                    pass
                await asyncio.sleep(0.1)
        created = "AdminClient.create_topic_on_cluster"
    except Exception as exc:  # noqa: BLE001 - reported in the ready line
        created = f"auto ({type(exc).__name__}: {exc})"
    producer = Producer(a.group, a.namesrv)
    await producer.start()
    probes: dict[str, int] = {}
    stored = 0  # probes stored (any SendResult): the consumer gets them too
    deadline = time.monotonic() + 60
    while True:  # SEND_OK once the slave acks (SYNC_MASTER) / at once (ASYNC_MASTER)
        try:
            status = status_name(await producer.send(Message(topic, body)))
            stored += 1
        except Exception as exc:  # noqa: BLE001 - route or slave not there yet
            status = type(exc).__name__
        probes[status] = probes.get(status, 0) + 1
        if status == "SEND_OK" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    emit({"ready": status == "SEND_OK", "client": client.__file__, "topic_created_by": created, "probes": probes})

    sent = 0
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    latencies: list[float] = []
    running = True

    async def sender(first: int) -> None:
        nonlocal sent
        perf = time.perf_counter
        turn = first
        while running:
            turn += 1
            t0 = perf()
            try:
                result = await producer.send(Message(names[turn % len(names)], body))
            except Exception as exc:  # noqa: BLE001 - counted, and the sender goes on as an application would
                name = type(exc).__name__
                errors[name] = errors.get(name, 0) + 1
                await asyncio.sleep(0.01)
                continue
            latencies.append(perf() - t0)
            name = status_name(result)
            statuses[name] = statuses.get(name, 0) + 1
            sent += 1

    senders: list[asyncio.Task] = []
    async for cmd in commands():
        if cmd == "start":
            senders = [asyncio.create_task(sender(i)) for i in range(a.senders)]
        elif cmd == "mark":
            lat, latencies[:] = sorted(latencies), []
            emit({"t": time.monotonic(), "sent": sent, "stored": stored + sent, "statuses": dict(statuses),
                  "errors": dict(errors), "send_p50_ms": round(pct(lat, 0.5) * 1000, 2),
                  "send_p99_ms": round(pct(lat, 0.99) * 1000, 2),
                  "send_mean_ms": round(sum(lat) / len(lat) * 1000, 3) if lat else float("nan")})
        elif cmd == "stop":
            break
    running = False
    if senders:
        await asyncio.wait(senders, timeout=30)
    await producer.stop()
    emit({"stopped": True, "sent": sent})


async def serve_consumer(a) -> None:
    import client
    from client import ConsumeFromWhere, ConsumeStatus, PushConsumer

    received = 0
    e2e_ms: list[int] = []

    def listener(msgs):
        nonlocal received
        now_ms = int(time.time() * 1000)
        e2e_ms.extend(now_ms - getattr(m, "born_timestamp", now_ms) for m in msgs)
        received += len(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumers = []
    for i in range(a.groups):  # one group each: every group gets every message (fan-out)
        group = a.group if a.groups == 1 else f"{a.group}_{i}"
        consumer = PushConsumer(group, a.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        for name in topics(a):
            consumer.subscribe(name)
        consumer.register_message_listener(listener)
        await consumer.start()
        consumers.append(consumer)
    emit({"ready": True, "client": client.__file__})
    async for cmd in commands():
        if cmd == "mark":
            lat, e2e_ms[:] = sorted(e2e_ms), []
            emit({"t": time.monotonic(), "received": received,
                  "e2e_p50_ms": pct(lat, 0.5), "e2e_p99_ms": pct(lat, 0.99)})
        elif cmd == "stop":
            break
    for consumer in consumers:
        await consumer.stop()
    emit({"stopped": True, "received": received})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", choices=("producer", "consumer"))
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--senders", type=int, default=64)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8, help="queues of each topic the producer creates")
    ap.add_argument("--topics", type=int, default=1, help="topics (--queues each) the senders take in turn")
    ap.add_argument("--groups", type=int, default=1, help="consumer groups in the consumer process, each on every topic")
    args = ap.parse_args(argv)
    run_loop(serve_producer(args) if args.role == "producer" else serve_consumer(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
