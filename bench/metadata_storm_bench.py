"""Metadata storm: a probe producer's send latency while a client names thousands of new consumer groups.

Issue 22 item 4 measured, before batching: 1,000 pulls naming new groups (sent in 0.1 s) kept the broker at 100 % CPU
for 112 s and a probe's sends went from 1.8 to 30.7 ms p50; 5,000 kept it busy for 11.5 minutes. Every auto-created
group rewrote the whole subscriptionGroup.json. Measured here with 5,000 groups (2 shared cores): pulls 0.2 broker CPU
seconds, probe p50/p99 0.8/24 ms (before: 11.4 s, 10.6/378 ms, busy 32 s); heartbeats 1.0 s, 1.1/190 ms (before:
34.2 s, 14.1/415 ms, busy 64 s).

Per storm kind (``pull``: PULL_MESSAGE naming a new group each; ``heartbeat``: HEART_BEAT with a new consumer group
each, which also creates its %RETRY% topic and re-registers with the nameserver), real processes on 127.0.0.1: a
nameserver and a broker (``harness.procs.scratch_broker``). A probe sends one 100-byte message at a time to an
existing topic, 10 ms apart, on its own connection, for ``--quiet`` seconds, then while the storm's requests are
sent (``--chunk`` in flight at once on another connection) and until the broker is idle again (under 0.1 core over
0.5 s, at most ``--max-busy`` seconds). Reported: the probe's p50/p99/max before and during the storm, the seconds
to send the storm and until the broker was idle, the broker's CPU seconds, and how often subscriptionGroup.json
was written (``rocketmq_metadata_persists_total``; "-" where the broker does not export it).

``--base COMMIT`` runs the same storm against that commit too (``git archive`` into a temporary directory; this
file is run there as a child whose imports are that tree's), with ``--base-groups`` groups and the same
``--max-busy`` cap, since the old code needs minutes per thousand groups. The issue's figures are kept in the JSON
for reference. Usage: ``python -m bench.metadata_storm_bench [--groups 5000] [--base 8ae3e6b]``. Writes
``bench/results/metadata_storm_bench.json``. Never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.cpu import cpu_s, settle
from bench.report import print_table, write_json
from harness.procs import scratch_broker
from remoting import fastjson
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.frame_codec import RemotingCommand
from remoting.message_headers import PullHeader, SendHeader

TOPIC = "StormProbeTopic"
ISSUE_BEFORE = {
    "1000_pulls": {"busy_s": 112, "probe_p50_ms_quiet": 1.8, "probe_p50_ms_storm": 30.7},
    "5000_pulls": {"busy_s": 690},
}
COLUMNS = ["tree", "kind", "groups", "probe_p50_ms_quiet", "probe_p99_ms_quiet", "probe_p50_ms_storm",
           "probe_p99_ms_storm", "probe_max_ms_storm", "storm_send_s", "busy_s", "still_busy", "broker_cpu_s",
           "group_file_writes"]


def _percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _group_writes(metrics_port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("rocketmq_metadata_persists_total{") and 'file="subscriptionGroup.json"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def _send(topic: str, body: bytes) -> RemotingCommand:
    header = SendHeader(producer_group="storm-probe", topic=topic, queue_id=0)
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext=header.to_v2(), body=body)


def _pull(group: str) -> RemotingCommand:
    header = PullHeader(consumer_group=group, topic=TOPIC, queue_id=0, queue_offset=0, max_msg_nums=1)
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext=header.to_ext())


def _heartbeat(group: str) -> RemotingCommand:
    body = {
        "clientID": f"storm-client-{group}",
        "consumerDataSet": [{
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY", "groupName": group,
            "messageModel": "CLUSTERING", "unitMode": False,
            "subscriptionDataSet": [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG",
                                     "subString": "*", "subVersion": 1, "tagsSet": [], "topic": TOPIC}],
        }],
        "producerDataSet": [],
    }
    return RemotingCommand(RequestCode.HEART_BEAT, body=fastjson.dumps(body))


async def probe(addr: str, out: Path, gap_s: float = 0.01) -> None:
    """The probe process: one send at a time, ``gap_s`` apart, until ``<out>.stop`` exists; writes
    ``[[monotonic start, ms, ok], ...]`` to ``out``. Its own process, so the storm's client never delays it."""
    client = RemotingClient(name="storm-probe")
    stop = out.with_name(out.name + ".stop")
    samples = []
    while not stop.exists():
        started = time.monotonic()
        try:
            ok = (await client.invoke(addr, _send(TOPIC, b"p" * 100), 30)).code == 0
        except Exception:  # noqa: BLE001 - a failed probe is counted, the measurement goes on
            ok = False
        samples.append([started, (time.monotonic() - started) * 1000, ok])
        await asyncio.sleep(gap_s)
    await client.close()
    out.write_text(json.dumps(samples))


class Probe:
    """``probe`` in a child process of this bench's interpreter and tree."""

    def __init__(self, addr: str, workdir: Path) -> None:
        self.out = workdir / "probe.json"
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.metadata_storm_bench", "--probe", addr,
                                      str(self.out)], cwd=os.getcwd())

    def samples(self) -> list[list]:
        self.out.with_name(self.out.name + ".stop").touch()
        self.proc.wait(timeout=60)
        return json.loads(self.out.read_text())


async def one_storm(kind: str, groups: int, *, quiet_s: float, chunk: int, max_busy_s: float) -> dict:
    with scratch_broker("metadata-storm-") as (work, _ns, broker):
        admin = RemotingClient(name="storm-admin")
        create = RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext={
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
        assert (await admin.invoke(broker.addr, create, 30)).code == 0
        await settle(broker.pid, idle_cores=0.1)
        prober = Probe(broker.addr, work)
        await asyncio.sleep(quiet_s)
        writes_before = _group_writes(broker.metrics_port)
        cpu_before = cpu_s(broker.pid)
        started = time.monotonic()
        make = _pull if kind == "pull" else _heartbeat
        names = [f"storm-{kind}-{i}" for i in range(groups)]
        for start in range(0, groups, chunk):
            await asyncio.gather(*(admin.invoke(broker.addr, make(g), 600) for g in names[start : start + chunk]))
        storm_send_s = time.monotonic() - started
        waited = await settle(broker.pid, idle_cores=0.1, window_s=0.5, limit_s=max_busy_s)
        ended = time.monotonic()
        busy_s = ended - started
        broker_cpu = cpu_s(broker.pid) - cpu_before
        writes_after = _group_writes(broker.metrics_port)
        samples = prober.samples()
        await admin.close()
    quiet = [ms for t, ms, _ in samples if t < started]
    storm = [ms for t, ms, _ in samples if started <= t <= ended]
    return {
        "kind": kind,
        "groups": groups,
        "probe_p50_ms_quiet": round(statistics.median(quiet), 2) if quiet else float("nan"),
        "probe_p99_ms_quiet": round(_percentile(quiet, 0.99), 2),
        "probe_p50_ms_storm": round(statistics.median(storm), 2) if storm else float("nan"),
        "probe_p99_ms_storm": round(_percentile(storm, 0.99), 2),
        "probe_max_ms_storm": round(max(storm), 2) if storm else float("nan"),
        "probe_sends_storm": len(storm),
        "probe_failures": sum(1 for _, _, ok in samples if not ok),
        "storm_send_s": round(storm_send_s, 2),
        "busy_s": round(busy_s, 1),
        "still_busy": "yes" if waited >= max_busy_s else "no",
        "broker_cpu_s": round(broker_cpu, 1),
        "group_file_writes": "-" if None in (writes_before, writes_after) else int(writes_after - writes_before),
    }


def run_base(commit: str, args) -> list[dict]:
    """This bench copied into a ``git archive`` of ``commit`` and run there: a child process whose imports (broker,
    harness, bench helpers) are that tree's."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="metadata-storm-base-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(repo), "archive", commit], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        shutil.copy(Path(__file__).resolve(), tree / "bench" / "metadata_storm_bench.py")
        out = Path(tmp) / "base.json"
        cmd = [sys.executable, "-m", "bench.metadata_storm_bench", "--child", str(out),
               "--groups", str(args.base_groups), "--kinds", *args.kinds, "--quiet", str(args.quiet),
               "--chunk", str(args.chunk), "--max-busy", str(args.max_busy)]
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
        env.pop("NAMESRV_ADDR", None)
        subprocess.run(cmd, check=True, cwd=str(tree), env=env, timeout=args.max_busy * 4 * len(args.kinds) + 600)
        return [{"tree": f"base {commit}", **row} for row in json.loads(out.read_text())]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=5000)
    parser.add_argument("--kinds", nargs="+", default=["pull", "heartbeat"], choices=["pull", "heartbeat"])
    parser.add_argument("--quiet", type=float, default=3.0, help="seconds of probing before the storm")
    parser.add_argument("--chunk", type=int, default=250, help="storm requests in flight at once")
    parser.add_argument("--max-busy", type=float, default=90.0, help="seconds to wait for the broker to go idle")
    parser.add_argument("--base", default="", help="also run this commit (e.g. 8ae3e6b, before batching)")
    parser.add_argument("--base-groups", type=int, default=1000)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)  # run by --base inside the old tree
    parser.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)  # ADDR OUT: the probe process
    args = parser.parse_args(argv)
    if args.probe:
        asyncio.run(probe(args.probe[0], Path(args.probe[1])))
        return
    rows = [asyncio.run(one_storm(kind, args.groups, quiet_s=args.quiet, chunk=args.chunk,
                                  max_busy_s=args.max_busy)) for kind in args.kinds]
    if args.child:
        Path(args.child).write_text(json.dumps(rows))
        return
    rows = [{"tree": "this", **row} for row in rows]
    if args.base:
        rows += run_base(args.base, args)
    print_table("probe sends (one at a time, 10 ms apart) during a storm of new consumer groups", COLUMNS,
                [[r[c] for c in COLUMNS] for r in rows])
    write_json("metadata_storm_bench", {"args": vars(args), "rows": rows, "issue_before": ISSUE_BEFORE})


if __name__ == "__main__":
    main()
