"""Topology commands: clusterList, brokerStatus, wipeWritePerm / addWritePerm (mqadmin ClusterListSubCommand,
BrokerStatusSubCommand, WipeWritePermSubCommand, AddWritePermSubCommand)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from ctl.options import DEFAULT_NAMESRV, BrokerAddrOpt, ClusterOpt, JsonOpt, NamesrvOpt, one_target
from ctl.output import Column, Output, format_kv, format_table
from ctl.watch import CountOpt, IntervalOpt, repeat_on_cluster

if TYPE_CHECKING:
    from ctl.rpc import Cluster

app = typer.Typer()

CLUSTER_COLUMNS = [
    Column("Cluster Name", "clusterName"),
    Column("Broker Name", "brokerName"),
    Column("BID", "brokerId"),
    Column("Addr", "addr"),
    Column("Role", "role"),
    Column("Version", "version"),
    Column("InTPS(LOAD)", "inTps"),
    Column("OutTPS(LOAD)", "outTps"),
    Column("Hour", "hour"),
    Column("SPACE", "space"),
    Column("ACTIVATED", "activated"),
]


def _first_number(text: str | None) -> float | None:
    """The first of RocketMQ's "10 s 60 s 600 s" figures: "12.5 10.1 9.8" -> 12.5."""
    if not text:
        return None
    try:
        return float(text.split()[0])
    except ValueError:
        return None


def _role(cluster, ref, runtime: dict[str, str]) -> str:
    role = runtime.get("brokerRole")
    if not role:
        from client.errors import MQClientError

        try:
            role = cluster.run(cluster.client.broker_config(ref.addr)).get("brokerRole")
        except MQClientError:  # the role column is informative; a busy broker must not fail the listing
            role = None
    return role or ("MASTER" if ref.is_master else "SLAVE")


def cluster_rows(cluster, cluster_name: str | None = None) -> list[dict]:
    """One row per registered broker address; a broker that does not answer shows as UNREACHABLE."""
    from client.errors import NoAnswerError

    rows = []
    for ref in cluster.brokers(cluster_name):
        row: dict = {
            "clusterName": ref.cluster,
            "brokerName": ref.broker_name,
            "brokerId": ref.broker_id,
            "addr": ref.addr,
        }
        try:
            runtime = cluster.run(cluster.client.broker_runtime_info(ref.addr))
        except NoAnswerError:
            row.update(role="UNREACHABLE", version=None, inTps=None, outTps=None, hour=None, space=None, activated=None)
            rows.append(row)
            continue
        earliest = int(runtime.get("earliestMessageTimeStamp") or 0)
        row.update(
            role=_role(cluster, ref, runtime),
            version=runtime.get("brokerVersionDesc"),
            inTps=_first_number(runtime.get("putTps")),
            outTps=_first_number(runtime.get("getTransferredTps") or runtime.get("getTransferedTps")),
            hour=round((time.time() * 1000 - earliest) / 3_600_000, 2) if earliest > 0 else 0.0,
            space=_first_number(runtime.get("commitLogDiskRatio")),
            activated=runtime.get("brokerActive", "true").lower() == "true",
        )
        if runtime.get("controllerAddr"):  # controller mode: the broker names its controller
            row.update(controllerAddr=runtime["controllerAddr"], storeEpoch=int(runtime.get("masterEpoch") or 0))
        rows.append(row)
    return rows


CONTROLLER_COLUMNS = [
    Column("CID", "controllerBrokerId"),
    Column("MasterEpoch", "masterEpoch"),
    Column("InSyncStateSet", "inSyncStateSet"),
]


def add_controller_view(cluster, rows: list[dict]) -> tuple[list[Column], list[str], dict | None]:
    """Controller mode: each row gets the broker's controller brokerId, its group's masterEpoch and whether it is in
    the SyncStateSet; a footer names the active controller and each group's SyncStateSet. Classic mode: nothing."""
    from ctl.controller import ControllerView, NoView, controller_lines, controller_view

    addrs = {r["controllerAddr"] for r in rows if r.get("controllerAddr")}
    if not addrs:
        return CLUSTER_COLUMNS, [], None
    names = sorted({r["brokerName"] for r in rows})
    view = controller_view(cluster, addrs, names)
    for row in rows:
        group = view.groups.get(row["brokerName"]) if isinstance(view, ControllerView) else None
        cid = group.id_of(row["addr"]) if group is not None else None
        row.update(controllerBrokerId=cid, masterEpoch=group.master_epoch if group else None,
                   inSyncStateSet=(cid in group.sync_state_set) if group is not None and cid is not None else None)
    data = None
    if isinstance(view, NoView):
        data = {"error": view.reason}
    elif view is not None:
        data = {"addrs": view.addrs, "active": view.metadata.get("controllerLeaderAddress") or None,
                "activeId": view.metadata.get("controllerLeaderId") or None,
                "groups": {n: g.to_json() for n, g in view.groups.items()}}
    return CLUSTER_COLUMNS + CONTROLLER_COLUMNS, controller_lines(view, names, True), data


@app.command("clusterList")
def cluster_list(
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    cluster_name: ClusterOpt = None,
    json: JsonOpt = False,
    interval: IntervalOpt = None,
    count: CountOpt = None,
):
    """List cluster infos: one row per broker address, the master as BID 0."""
    out = Output(json)

    def report(cluster: Cluster) -> list[str]:
        rows = cluster_rows(cluster, cluster_name)
        columns, footer, controller = add_controller_view(cluster, rows)
        if controller is None and not footer:
            return out.table_lines(columns, rows)
        # controller mode: --json is {"brokers": rows, "controller": ...} (classic mode keeps the plain list)
        return out.lines({"brokers": rows, "controller": controller}, [*format_table(columns, rows), *footer])

    repeat_on_cluster(namesrv, report, interval, count, title="clusterList")


@app.command("brokerStatus")
def broker_status(
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    broker_addr: BrokerAddrOpt = None,
    cluster_name: ClusterOpt = None,
    json: JsonOpt = False,
    interval: IntervalOpt = None,
    count: CountOpt = None,
):
    """Fetch a broker's runtime status (-b addr), or every broker's of a cluster (-c), as sorted key : value."""
    one_target(broker_addr, cluster_name)
    out = Output(json)

    def report(cluster: Cluster) -> list[str]:
        addrs = cluster.target_addrs(broker_addr, cluster_name, masters_only=False)
        tables = {addr: cluster.run(cluster.client.broker_runtime_info(addr)) for addr in addrs}
        lines: list[str] = []
        for addr, table in tables.items():
            lines += format_kv(table, prefix=f"{addr:<24}" if cluster_name else "")
        return out.lines(tables if cluster_name else tables[broker_addr], lines)

    repeat_on_cluster(namesrv, report, interval, count, title="brokerStatus")


def _write_perm(action: str, broker_name: str, namesrv: str, json: bool) -> None:
    """wipeWritePerm / addWritePerm on every nameserver of -n (each holds its own route table)."""
    from ctl.errors import Refused
    from ctl.rpc import Cluster
    from remoting.codes import RequestCode

    code, field = {
        "wipe": (RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount"),
        "add": (RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount"),
    }[action]
    rows, lines = [], []
    with Cluster(namesrv) as cluster:
        for addr, response in cluster.each_namesrv(code, {"brokerName": broker_name}):
            if response.code != 0:
                raise Refused(f"nameserver {addr}", code.name, response.code, response.remark or "")
            count = int((response.ext or {}).get(field, 0))
            rows.append({"namesrvAddr": addr, "brokerName": broker_name, "topicCount": count})
            lines.append(f"{action} write perm of broker[{broker_name}] in name server[{addr}] OK, {count}")
    Output(json).show(rows, lines)


BrokerNameOpt = Annotated[str, typer.Option("-b", "--brokerName", help="Broker name (a group), e.g. broker-a.")]


@app.command("wipeWritePerm")
def wipe_write_perm(broker_name: BrokerNameOpt, namesrv: NamesrvOpt = DEFAULT_NAMESRV, json: JsonOpt = False):
    """Remove a broker group's write permission in every nameserver: producers stop sending to it (drain)."""
    _write_perm("wipe", broker_name, namesrv, json)


@app.command("addWritePerm")
def add_write_perm(broker_name: BrokerNameOpt, namesrv: NamesrvOpt = DEFAULT_NAMESRV, json: JsonOpt = False):
    """Give a broker group its write permission back in every nameserver."""
    _write_perm("add", broker_name, namesrv, json)
