"""`mqctl cluster wait`: block until a cluster is ready to use, then print the addresses a user needs.

Ready means: the nameserver answers; the cluster has at least ``--groups`` broker groups registered, each with its
master (BID 0) and at least ``--slaves`` slaves; and each master reports (GET_BROKER_HA_STATUS) every registered
slave connected and in sync (state OK: within haMaxGapNotInSync of the master). Anything short of that is named
in the progress line and, at ``--timeout``, in the error, so a deployment script fails with the reason instead
of a hanging first send. The defaults are the compose and `mqctl dev` cluster: DefaultCluster, two groups of a
master and one slave. Prometheus and Grafana are shown only when they answer (compose publishes them on 9090 and
3000; an offline host may have no Grafana).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated

import typer

from ctl.errors import NAMESRV_HINT, CtlError, describe
from ctl.options import DEFAULT_NAMESRV, JsonOpt, NamesrvOpt
from ctl.output import Output
from ctl.progress import Progress, ProgressOpt

app = typer.Typer(help="Cluster health: wait until every broker is registered and every slave in sync.",
                  no_args_is_help=True)

DEFAULT_CLUSTER = "DefaultCluster"
DEFAULT_PROMETHEUS = "127.0.0.1:9090"
DEFAULT_GRAFANA = "127.0.0.1:3000"
POLL_S = 0.5
CALL_TIMEOUT_S = 2.0  # one slow broker must not hold a short --timeout far past its end
PROBE_TIMEOUT_S = 1.0
IN_SYNC = "OK"


class ClusterNotReady(CtlError):
    def __init__(self, cluster: str, timeout_s: float, state: Readiness) -> None:
        if state.namesrv_answered:
            hint = (f"check those brokers' logs, `mqctl clusterList` and `mqctl haStatus -c {cluster}`, "
                    "or wait longer with --timeout")
        else:
            hint = f"{NAMESRV_HINT}, or wait longer with --timeout"
        super().__init__(f"cluster {cluster} not ready within {timeout_s:g}s: {'; '.join(state.problems)}", hint=hint)
        self.problems = state.problems


@dataclass
class Readiness:
    problems: list[str] = field(default_factory=list)
    brokers: list[dict] = field(default_factory=list)  # every registered broker of the cluster
    groups: int = 0
    namesrv_answered: bool = False

    @property
    def ready(self) -> bool:
        return not self.problems


def check(cluster, cluster_name: str, groups: int, slaves: int) -> Readiness:
    """One look at the cluster: what is registered and what is not ready yet."""
    from client.errors import MQClientError

    state = Readiness()
    cluster.refresh()
    try:
        refs = cluster.brokers()
    except (MQClientError, CtlError) as exc:  # no nameserver answers (yet)
        state.problems.append(_reason(exc))
        return state
    state.namesrv_answered = True
    refs = [r for r in refs if r.cluster == cluster_name]
    state.brokers = [
        {"clusterName": r.cluster, "brokerName": r.broker_name, "brokerId": r.broker_id, "addr": r.addr} for r in refs
    ]
    names = sorted({r.broker_name for r in refs})
    state.groups = len(names)
    if len(names) < groups:
        have = f" ({', '.join(names)})" if names else ""
        state.problems.append(f"{len(names)} of {groups} broker groups registered{have}")
    for name in names:
        members = {r.broker_id: r.addr for r in refs if r.broker_name == name}
        master = members.pop(0, None)
        if master is None:
            state.problems.append(f"{name}: no master registered")
            continue
        if len(members) < slaves:
            state.problems.append(f"{name}: {len(members)} of {slaves} slaves registered")
        if not members:
            continue
        try:
            status = cluster.run(cluster.client.ha_status(master))
        except (MQClientError, CtlError) as exc:
            state.problems.append(f"{name}: {_reason(exc)}")
            continue
        state.problems += _sync_problems(name, members, status.slaves)
    return state


def _reason(exc: Exception) -> str:
    """The error's message without its hint: the wait's own hint says what to do."""
    return (describe(exc) or str(exc)).split("; ")[0]


def _sync_problems(name: str, slaves: dict[int, str], connections) -> list[str]:
    """Registered slaves the master does not report in sync. A connection names its brokerId (pyrmq); a RocketMQ
    broker's does not, and then enough connections in sync must do."""
    by_id = {c.broker_id: c for c in connections if c.broker_id}
    problems = []
    if by_id:
        for broker_id, addr in sorted(slaves.items()):
            conn = by_id.get(broker_id)
            if conn is None:
                problems.append(f"{name}: slave {broker_id} ({addr}) not connected to its master")
            elif conn.state.upper() != IN_SYNC:
                problems.append(f"{name}: slave {broker_id} ({addr}) {conn.state}, {conn.lag_bytes} bytes behind")
        return problems
    in_sync = sum(1 for c in connections if c.state.upper() == IN_SYNC)
    if in_sync < len(slaves):
        problems.append(f"{name}: {in_sync} of {len(slaves)} slaves in sync with the master")
    return problems


def wait_ready(
    namesrv: str, cluster_name: str, groups: int, slaves: int, timeout_s: float, meter: Progress
) -> Readiness:
    """Poll ``check`` until ready; ClusterNotReady naming what is missing at ``timeout_s``."""
    from ctl.rpc import Cluster

    deadline = time.monotonic() + timeout_s
    with Cluster(namesrv, timeout_s=CALL_TIMEOUT_S) as cluster:
        while True:
            state = check(cluster, cluster_name, groups, slaves)
            if state.ready:
                meter.done(f"cluster {cluster_name} ready")
                return state
            left = deadline - time.monotonic()
            if left <= 0:
                meter.done()
                raise ClusterNotReady(cluster_name, timeout_s, state)
            meter.update(f"waiting for {cluster_name} ({left:.0f}s left): {'; '.join(state.problems)}")
            time.sleep(min(POLL_S, left))


def answers(url: str) -> bool:
    """True when ``url`` answers 200 (no proxy: these are local addresses)."""
    import urllib.request  # only here: `mqctl --help` stays fast

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=PROBE_TIMEOUT_S) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def endpoints(prometheus: str, grafana: str) -> dict[str, str | None]:
    """The Prometheus and Grafana URLs that answer their health checks, else None."""
    found: dict[str, str | None] = {"prometheus": None, "grafana": None}
    if prometheus and answers(f"http://{prometheus}/-/ready"):
        found["prometheus"] = f"http://{prometheus}"
    if grafana and answers(f"http://{grafana}/api/health"):
        found["grafana"] = f"http://{grafana}"
    return found


def ready_lines(namesrv: str, cluster_name: str, state: Readiness, urls: dict[str, str | None]) -> list[str]:
    lines = [
        f"cluster {cluster_name} ready: {state.groups} broker group(s), {len(state.brokers)} broker(s) registered, "
        "every slave in sync",
        f"NAMESRV_ADDR={namesrv}",
    ]
    if urls.get("prometheus"):
        lines.append(f"Prometheus: {urls['prometheus']}")
    if urls.get("grafana"):
        lines.append(f"Grafana: {urls['grafana']}")
    return lines


def ready_data(namesrv: str, cluster_name: str, state: Readiness, urls: dict[str, str | None]) -> dict:
    return {"ready": True, "clusterName": cluster_name, "namesrvAddr": namesrv, "brokers": state.brokers, **urls}


ClusterNameOpt = Annotated[str, typer.Option("-c", "--clusterName", help="The cluster to wait for.")]
GroupsOpt = Annotated[int, typer.Option("--groups", min=1, help="Broker groups (masters) expected at least.")]
SlavesOpt = Annotated[int, typer.Option("--slaves", min=0, help="Slaves expected per broker group, in sync.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.0, help="Give up after this many seconds.")]


@app.command("wait")
def wait(
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    cluster_name: ClusterNameOpt = DEFAULT_CLUSTER,
    groups: GroupsOpt = 2,
    slaves: SlavesOpt = 1,
    timeout_s: TimeoutOpt = 60.0,
    prometheus: Annotated[
        str, typer.Option("--prometheus", help="Prometheus host:port, shown when it answers ('' to skip).")
    ] = DEFAULT_PROMETHEUS,
    grafana: Annotated[
        str, typer.Option("--grafana", help="Grafana host:port, shown when it answers ('' to skip).")
    ] = DEFAULT_GRAFANA,
    progress: ProgressOpt = None,
    json: JsonOpt = False,
):
    """Wait until every broker is registered and every slave in sync, then print the addresses to use.

    The defaults fit the compose and mqctl dev cluster (two groups of a master and a slave).
    """
    state = wait_ready(namesrv, cluster_name, groups, slaves, timeout_s, Progress(progress))
    urls = endpoints(prometheus, grafana)
    Output(json).show(ready_data(namesrv, cluster_name, state, urls), ready_lines(namesrv, cluster_name, state, urls))
