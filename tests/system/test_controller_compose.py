"""Controller mode on docker-compose.controller.yml (issue 23): three etcd members, two nameservers running the
controller, broker-a and broker-b of three controller-mode brokers each, all containers.

One cluster serves the module (built and started once, taken down at the end). Each test runs SYNC sends to a topic
that lives on one broker group only, with a push consumer recording every delivery, kills that group's master with
``mqctl kill master -b`` (the container the controller names) and judges the history with ``harness.checker``:
no SEND_OK lost, nothing read that was never sent, one id per queue offset.

- ``test_kill_master_...``: a SyncStateSet member becomes master and is brokerId 0 in the routes, SYNC sends get
  SEND_OK again, the consumer goes on; the killed container, started again, comes back as a slave and rejoins the
  SyncStateSet.
- ``test_failover_survives_...``: with one etcd member and the nameserver running the active controller killed
  first, the same failover happens (etcd keeps its majority, the other nameserver's controller takes over).
- ``test_prometheus_scrapes_...``: Prometheus scrapes every nameserver and broker, and every query of the
  dashboard's "Controller mode" row returns series.

Skipped only when no Docker engine is reachable (the images are deploy/images/build.sh's, as for every system test).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from client import AdminClient, SendStatus
from controller.client import ReplicaInfo
from harness.checker import Mode, Outcome, Read, Send, check
from harness.controller_compose import (
    COMPOSE_FILE,
    GROUPS,
    OCTETS,
    SERVICES,
    ControllerCompose,
    compose_command,
    free_net_prefix,
)
from harness.waiting import async_wait_until
from tests.system.cluster import ClusterError, ComposeCluster, docker_engine_reachable
from tests.system.harness import WEAK, BackgroundProducer, Delivery, RecordingConsumer, amqctl, drain, unique

RATE = 40  # SYNC sends a second to the group under test
QUEUES = 4


@pytest.fixture(scope="module")
def ccluster(request, images):
    """The module's controller-mode compose cluster (logs kept in the temp dir when a test failed)."""
    if not docker_engine_reachable():
        pytest.skip("no Docker engine reachable")
    compose = compose_command()
    if compose is None:
        pytest.fail("a Docker engine is reachable but neither `docker compose` nor `docker-compose` is installed")
    try:
        prefix = free_net_prefix()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    c = ComposeCluster(compose=compose, env={**images, "PYRMQ_CONTROLLER_NET": prefix}, compose_file=COMPOSE_FILE,
                       services=SERVICES, project=f"pyrmq-ctl-test-{os.urandom(4).hex()}")
    failed_before = request.session.testsfailed
    try:
        c.up(timeout_s=300)
    except ClusterError as exc:
        logs = c.logs(tail=200)
        c.down()
        pytest.fail(f"controller compose cluster {c.project} did not come up: {exc}\n--- logs ---\n{logs}")
    ctl = ControllerCompose(prefix)
    try:
        for group in GROUPS:
            asyncio.run(ctl.whole(group, 120))
        yield c, ctl
    finally:
        if request.session.testsfailed > failed_before:
            path = Path(tempfile.gettempdir()) / f"{c.project}.log"
            path.write_text(c.logs())
            print(f"\ncontroller compose tests failed: logs of {c.project} in {path}")
        if os.environ.get("PYRMQ_KEEP_CLUSTER") != "1":
            c.down()


def _history(producer: BackgroundProducer) -> list[Send]:
    """The producer's record as ``harness.checker`` sends: SEND_OK acked, stored-on-master statuses weak, no answer
    unknown (it may or may not be stored)."""
    out = []
    for mid, s in producer.sends.items():
        if s.status is SendStatus.SEND_OK:
            outcome = Outcome.ACKED
        elif s.status in WEAK:
            outcome = Outcome.WEAK
        else:
            outcome = Outcome.UNKNOWN
        out.append(Send(mid, "p", int(mid.rsplit("-", 1)[1]), outcome,
                        detail=s.status.name if s.status else s.error[:80]))
    return out


def _reads(deliveries: list[Delivery]) -> list[Read]:
    return [Read(d.id, f"{d.broker_name}:{d.queue_id}", d.queue_offset) for d in deliveries]


async def _topic_on(ctl: ControllerCompose, group: str) -> str:
    """A topic with QUEUES queues on ``group`` alone, known to every member (so any of them can take over)."""
    topic = unique(f"ctl_{group.replace('-', '_')}")
    info = await ctl.info(group)
    await amqctl("updateTopic", "-n", ctl.namesrv, "-b", info.master_address, "-t", topic, "-r", str(QUEUES),
                 "-w", str(QUEUES))
    async with AdminClient(ctl.namesrv, timeout_s=3.0) as admin:
        await ctl.await_topic_everywhere(admin, group, topic, 40)
    return topic


async def _kill_master_and_check(cluster: ComposeCluster, ctl: ControllerCompose, group: str, notes: list[str]) -> dict:
    """SYNC load on a topic of ``group`` alone, ``mqctl kill master -b group``, then: a SyncStateSet member is master
    and brokerId 0 in the route, SEND_OK again, the consumer reads what was sent after the kill. Returns what the
    caller needs to go on (the killed service, the history so far is checked here)."""
    topic = await _topic_on(ctl, group)
    before = await ctl.info(group)
    old_master = ctl.service_at(before.master_address)
    deliveries: list[Delivery] = []
    producer = BackgroundProducer(topic, rate=RATE, namesrv_addr=ctl.namesrv, send_timeout_s=5.0,
                                  retry_times_when_send_failed=2)
    consumer = RecordingConsumer(unique("ctl_group"), topic, deliveries=deliveries, namesrv_addr=ctl.namesrv,
                                 broker_by_host=ctl.broker_by_host)
    try:
        await consumer.start()
        await producer.start()
        await async_wait_until(lambda: len(producer.with_status(SendStatus.SEND_OK)) >= 2 * RATE, 30,
                               lambda: f"SEND_OK before the kill: {producer.status_counts()}", 0.1)

        t_kill = time.monotonic()  # the SIGKILL happens within the command (which then reads clusterList)
        result = await amqctl("kill", "master", "-b", group, "-n", ctl.namesrv, "--json",
                              project=cluster.project)
        t_shown = time.monotonic()
        assert f"kill {old_master} " in " ".join(json.loads(result.stdout)["did"]), result.stdout

        # a member of the SyncStateSet becomes master, and the nameserver routes brokerId 0 to it
        async def new_master() -> ReplicaInfo | None:
            try:
                info = await ctl.info(group)
            except Exception:  # noqa: BLE001 - the controller may be taking over too: ask again
                return None
            return info if info.master_broker_id not in (None, before.master_broker_id) else None

        after = await async_wait_until(new_master, 30, f"{group}: a new master after {old_master} was killed", 0.1)
        assert after.master_broker_id in before.sync_state_set and after.master_epoch > before.master_epoch, (
            before, after)
        async with AdminClient(ctl.namesrv, timeout_s=3.0) as admin:
            async def routed() -> bool:
                route = await admin.topic_route(topic)
                return route.broker_addrs.get(group, {}).get(0) == after.master_address

            await async_wait_until(routed, 30, f"the route of {topic} names {after.master_address} as brokerId 0",
                                   0.2)
        t_routed = time.monotonic()

        # SYNC sends get SEND_OK again (sent once the route names the new master: the old one is dead by then), and
        # the consumer reads them from the new master
        def acked_after() -> list[str]:
            return [k for k, s in producer.sends.items() if s.invoked > t_routed and s.status is SendStatus.SEND_OK]

        await async_wait_until(lambda: len(acked_after()) >= RATE, 60,
                               lambda: f"SEND_OK from the new master: {producer.status_counts()}", 0.1)
        await async_wait_until(lambda: {d.id for d in deliveries} & set(acked_after()), 60,
                               "the consumer reads messages acknowledged by the new master", 0.1)
        notes.append(f"{group}: killed {old_master} (brokerId {before.master_broker_id}, epoch "
                     f"{before.master_epoch}); master now {ctl.service_at(after.master_address)} (brokerId "
                     f"{after.master_broker_id}, epoch {after.master_epoch}); the kill command took "
                     f"{t_shown - t_kill:.2f}s (it shows clusterList after the kill), the route named the new master "
                     f"{t_routed - t_kill:.2f}s after it started; sends {producer.status_counts()}")
        await producer.stop()
        await drain(producer, deliveries, 60, what=f"{group} after the failover: ")
    finally:
        await producer.stop()
        await consumer.stop()
    report = check(_history(producer), _reads(deliveries))
    notes.append(f"checker: {report.figures()}")
    assert not report.problems(Mode.SYNC), (report.problems(Mode.SYNC), notes)
    assert report.acked >= 3 * RATE, notes
    return {"killed": old_master, "killed_id": before.master_broker_id, "after": after, "topic": topic}


async def _rejoins(cluster: ComposeCluster, ctl: ControllerCompose, group: str, killed: str, killed_id: int,
                   master_id: int, *target: str) -> None:
    """``mqctl start <target>``: the killed broker comes back as a slave and rejoins the SyncStateSet; the master
    stays."""
    result = await amqctl("start", *target, "-n", ctl.namesrv, "--json", project=cluster.project)
    assert f"start {killed} " in " ".join(json.loads(result.stdout)["did"]), result.stdout
    info = await ctl.whole(group, 90)
    assert info.master_broker_id == master_id and killed_id in info.sync_state_set, info
    async with AdminClient(ctl.namesrv, timeout_s=3.0) as admin:
        async def slave_streaming() -> bool:
            status = await admin.ha_status(ctl.address[killed])
            return status.role == "SLAVE" and status.connected

        await async_wait_until(slave_streaming, 30, f"{killed} streams from the new master as a slave", 0.5)


async def test_kill_master_elects_a_sync_state_set_member_and_the_old_master_rejoins_as_slave(ccluster):
    cluster, ctl = ccluster
    notes: list[str] = []
    out = await _kill_master_and_check(cluster, ctl, "broker-a", notes)
    # `start master -b` in controller mode starts the member that is down (the controller names another master)
    await _rejoins(cluster, ctl, "broker-a", out["killed"], out["killed_id"], out["after"].master_broker_id,
                   "master", "-b", "broker-a")
    # clusterList from the host shows what the controller decided: brokerId 0 is the new master, epoch and set
    listing = json.loads((await amqctl("clusterList", "-n", ctl.namesrv, "--json")).stdout)
    group = listing["controller"]["groups"]["broker-a"]
    assert listing["controller"]["active"] in ctl.addrs, listing["controller"]
    assert (group["masterAddress"], group["masterEpoch"], sorted(group["syncStateSet"])) == (
        out["after"].master_address, out["after"].master_epoch, [1, 2, 3]), group
    print("\n" + "\n".join(notes))


async def test_failover_survives_the_loss_of_one_etcd_member_and_one_nameserver(ccluster):
    cluster, ctl = ccluster
    notes: list[str] = []
    await ctl.whole("broker-b", 60)
    active = await ctl.active()
    namesrv = next(s for s in ("namesrv-1", "namesrv-2") if f".{OCTETS[s]}:" in (active or ""))
    await amqctl("kill", "etcd-2", "-n", ctl.namesrv, project=cluster.project)
    await amqctl("kill", namesrv, "-n", ctl.namesrv, project=cluster.project)
    t_kill = time.monotonic()
    try:
        # the other nameserver's controller takes over once the killed one's etcd lease ends
        await ctl.whole("broker-b", 30)
        notes.append(f"killed etcd-2 and {namesrv} (it ran the active controller); the other controller answered "
                     f"{time.monotonic() - t_kill:.1f}s later")
        out = await _kill_master_and_check(cluster, ctl, "broker-b", notes)
        await _rejoins(cluster, ctl, "broker-b", out["killed"], out["killed_id"], out["after"].master_broker_id,
                       out["killed"])
    finally:
        for service in ("etcd-2", namesrv):
            await amqctl("start", service, "-n", ctl.namesrv, project=cluster.project)
    print("\n" + "\n".join(notes))


def test_prometheus_scrapes_every_server_and_the_dashboards_controller_row_has_series(ccluster):
    """deploy/prometheus/prometheus-controller.yml: every nameserver and broker is scraped, and each query of the
    dashboard's "Controller mode" row returns series (after this module's failovers: elections, role changes)."""
    import urllib.parse
    import urllib.request

    import tests.integration.metrics.conftest as metrics_conftest
    from harness.waiting import wait_until

    _, ctl = ccluster
    prometheus = f"http://{ctl.prefix}.10:9090"

    def query(promql: str) -> list[dict]:
        url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.load(resp)["data"]["result"]

    want = {f"{s}:5557": 1.0 for s in OCTETS}

    def up() -> dict[str, float]:
        return {r["metric"]["instance"]: float(r["value"][1]) for r in query('up{job=~"pyrmq-.*"}')}

    wait_until(lambda: up() == want, 90, lambda: f"Prometheus scrapes both nameservers and six brokers; up = {up()}",
               interval_s=1.0)
    with pytest.MonkeyPatch.context() as mp:  # 5 s scrapes: windows of a minute hold enough samples
        mp.setattr(metrics_conftest, "GRAFANA_VARS", {"$__rate_interval": "1m", "$__interval": "5s", "$__range": "5m"})
        every = metrics_conftest.dashboard_queries()
        classic = metrics_conftest.dashboard_queries(skip_rows=(metrics_conftest.CONTROLLER_ROW,))
    row = [q for q in every if q not in classic]
    assert row, "the dashboard has no Controller mode row"

    def missing() -> list[str]:
        return [f"{title}: {expr}" for title, expr in row if not query(expr)]

    wait_until(lambda: not missing(), 60, lambda: f"controller-mode panels without series: {missing()}",
               interval_s=2.0)
