"""``python -m bench.controller_failover_bench --compose``: the failover measurement on docker-compose.controller.yml.

The clients run on the host (the SDK producer and PullConsumer of ``controller_failover_bench.measure``), the
cluster in containers with its confs' defaults. The master of broker-a is the container ``mqctl kill master -b
broker-a`` would kill (``ctl.chaos.Project``, asking the active controller); it is killed through the Docker API and
started again after the run, and each run waits until the group's SyncStateSet holds all three members again.
Besides the client's times, each run records the cluster's part: when the controller names another master and when
the nameserver routes brokerId 0 to it (polled every 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time

from bench.failover_measure import measure, summarize
from bench.report import median_of
from client import AdminClient, Message, Producer, PullConsumer, SendStatus
from harness.controller_compose import (
    COMPOSE_FILE,
    DEFAULT_PREFIX,
    REPO_ROOT,
    ControllerCompose,
    compose_command,
    free_net_prefix,
)

TOPIC = "ControllerFailoverComposeBench"
GROUP = "broker-a"
QUEUES = 2


def _compose(compose: list[str], project: str, env: dict[str, str], *args: str, timeout_s: float = 600) -> None:
    cmd = [*compose, "-p", project, "-f", str(COMPOSE_FILE), *args]
    done = subprocess.run(cmd, cwd=REPO_ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


async def _topic_everywhere(ctl: ControllerCompose, admin: AdminClient) -> None:
    info = await ctl.info(GROUP)
    await admin.update_topic(info.master_address, TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    await ctl.await_topic_everywhere(admin, GROUP, TOPIC, 60)


async def _cluster_side(ctl: ControllerCompose, admin: AdminClient, before, killed_at: float) -> dict:
    """The cluster's part of a failover, apart from the client's: when the controller names another master, and
    when the nameserver routes brokerId 0 to it (polled every 50 ms from the kill)."""
    elected = routed = None
    while (elected is None or routed is None) and time.monotonic() - killed_at < 30:
        if elected is None:
            try:
                if (await ctl.info(GROUP)).master_broker_id not in (None, before.master_broker_id):
                    elected = time.monotonic() - killed_at
            except Exception:  # noqa: BLE001 - a controller switching over: ask again
                pass
        if routed is None:
            try:
                addrs = dict((await admin.cluster_info()).broker_addr_table[GROUP].broker_addrs)
                if addrs.get(0) not in (None, before.master_address):
                    routed = time.monotonic() - killed_at
            except Exception:  # noqa: BLE001 - a nameserver busy: ask again
                pass
        await asyncio.sleep(0.05)
    return {"kill_to_elected_ms": round(elected * 1000, 1) if elected is not None else None,
            "kill_to_routed_ms": round(routed * 1000, 1) if routed is not None else None}


async def main_async(args: argparse.Namespace) -> dict:
    from ctl.chaos import Project

    compose = compose_command()
    if compose is None:
        raise SystemExit("--compose needs `docker compose` or `docker-compose`")
    own = args.project is None
    prefix = (free_net_prefix() if own else args.net) or DEFAULT_PREFIX
    project = args.project or f"pyrmq-cfb-{os.urandom(3).hex()}"
    env = {"PYRMQ_CONTROLLER_NET": prefix}
    ctl = ControllerCompose(prefix)
    started = time.monotonic()
    if own:
        _compose(compose, project, env, "up", "-d")
    runs: list[dict] = []
    try:
        await ctl.whole(GROUP, 240)
        up_s = time.monotonic() - started
        admin = await AdminClient(ctl.namesrv, timeout_s=3.0).start()
        producer = await Producer("controller-failover-compose-bench", ctl.namesrv).start()
        consumer = await PullConsumer("controller-failover-compose-bench", ctl.namesrv).start()
        try:
            await _topic_everywhere(ctl, admin)
            for i in range(50):
                assert (await producer.send(Message(TOPIC, b"m%d" % i))).status is SendStatus.SEND_OK
            for _ in range(args.runs):
                before = await ctl.whole(GROUP, 120)
                proj = await asyncio.to_thread(Project, project)
                service = await asyncio.to_thread(proj.service, "master", GROUP)
                container = proj.containers(service)[0]

                watch: list[asyncio.Task] = []

                async def kill() -> None:
                    await asyncio.to_thread(container.kill)
                    watch.append(asyncio.ensure_future(_cluster_side(ctl, admin, before, time.monotonic())))

                run = await measure(producer, consumer, TOPIC, GROUP, QUEUES, kill)
                side = await asyncio.wait_for(watch[0], 30)
                info = await ctl.info(GROUP)
                runs.append({**run, **side, "killed": service, "old_master": before.master_broker_id,
                             "new_master": info.master_broker_id, "master_epoch": info.master_epoch})
                await asyncio.to_thread(container.start)
            await ctl.whole(GROUP, 120)
        finally:
            await consumer.stop()
            await producer.stop()
            await admin.stop()
    finally:
        if own:
            _compose(compose, project, env, "down", "-v", "-t", "10")
    summary = summarize("docker-compose.controller.yml: SIGKILL of broker-a's master container -> first SEND_OK "
                        "on the elected one", runs)
    for key in ("kill_to_elected_ms", "kill_to_routed_ms"):
        times = [r[key] for r in runs if r[key] is not None]
        if times:
            summary[key] = {"median_ms": median_of(times), "min_ms": min(times), "max_ms": max(times)}
            print(f"{key}: median {median_of(times):.0f} ms (min {min(times):.0f}, max {max(times):.0f})")
    return {"args": vars(args), "mode": "compose", "project": project, "cluster_up_s": round(up_s, 1),
            "runs": runs, "summary": summary,
            "note": "2-core VM shared with other work: figures are noisy; defaults of deploy/conf/controller "
                    "(heartbeat 1 s, controllerHeartBeatTimeoutMills 10 s; a killed container's closed connections "
                    "start the election at once). kill_to_elected/kill_to_routed are the cluster's part; the rest "
                    "of kill_to_send_ok is the SDK's: its reconnect to the dead master's address, which no longer "
                    "answers at all, waits out the SDK's reconnect timeout (0.5 s) before its retry"}
