"""haStatus: replication state per master (5.x HAStatusSubCommand), from GET_BROKER_HA_STATUS (907).

On a master: a header block (#MasterAddr, #MasterCommitLogMaxOffset, #SlaveNum, #InSyncSlaveNum) and one row
per slave, named by its broker address (brokerIP1:listenPort, as it registers) and brokerId, with RocketMQ's
status words "OK" and "Fall Behind", plus "Stale" for a slave that is connected but has sent nothing for longer
than its heartbeat allows and "Disconnected" for one the master still remembers but no longer hears. On a slave
(-b slave address): its view of the master, with the same Stale/Disconnected words. #SinceLastRead is the time
since the peer last sent a byte; the broker decides STALE from it (``broker/ha/status.py`` says when). --json
adds each slave's HA socket peer (``haPeerAddr``) for debugging. ``-i SECONDS`` repeats the report
(``ctl/watch.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ctl.options import DEFAULT_NAMESRV, BrokerAddrOpt, ClusterOpt, JsonOpt, NamesrvOpt, one_target
from ctl.output import Column, Output, format_table, human_time
from ctl.watch import CountOpt, IntervalOpt, repeat_on_cluster

if TYPE_CHECKING:
    from ctl.rpc import Cluster

app = typer.Typer()

STATUS_WORDS = {"OK": "OK", "FALL_BEHIND": "Fall Behind", "STALE": "Stale", "DISCONNECTED": "Disconnected"}
SLAVE_COLUMNS = [
    Column("SlaveAddr", "slaveAddr"),
    Column("BrokerId", "brokerId"),
    Column("SlaveAckOffset", "slaveAckOffset"),
    Column("Diff", "diff"),
    Column("Status", "status"),
    Column("SinceLastRead", "sinceLastRead"),
    Column("TransferFromWhere", "transferFromWhere"),
]


def status_word(state: str) -> str:
    return STATUS_WORDS.get(state.upper(), state)


def since(ms: int) -> str:
    """Milliseconds since the last read as seconds with one decimal; N/A when unknown (-1)."""
    return "N/A" if ms < 0 else f"{ms / 1000:.1f}s"


def ha_report(addr: str, status) -> dict:
    if status.role.upper() == "SLAVE":
        return {
            "role": "SLAVE",
            "slaveAddr": addr,
            "masterAddr": status.master_ha_addr,
            "connected": status.connected,
            "status": status_word(status.link_state),
            "state": status.link_state,
            "sinceLastReadMs": status.since_last_read_ms,
            "staleAfterMs": status.stale_after_ms,
            "commitLogMaxOffset": status.commitlog_max_offset,
            "lastReadTime": human_time(status.last_read_timestamp),
            "lastWriteTime": human_time(status.last_write_timestamp),
            "replicatedBytes": status.replicated_bytes,
        }
    slaves = [
        {
            "slaveAddr": s.slave_addr,
            "brokerId": s.broker_id,
            "slaveAckOffset": s.ack_offset,
            "diff": s.lag_bytes if s.lag_bytes else status.commitlog_max_offset - s.ack_offset,
            "status": status_word(s.state),
            "state": s.state,
            "sinceLastRead": since(s.since_last_read_ms),
            "sinceLastReadMs": s.since_last_read_ms,
            "lastAckTime": human_time(s.last_ack_timestamp),
            "transferFromWhere": s.transfer_from,
            "haPeerAddr": s.peer_addr,
        }
        for s in status.slaves
    ]
    return {
        "role": status.role,
        "masterAddr": addr,
        "masterCommitLogMaxOffset": status.commitlog_max_offset,
        "slaveNum": len(slaves),
        "inSyncSlaveNum": status.in_sync_slave_count,
        "staleAfterMs": status.stale_after_ms,
        "slaves": slaves,
    }


def add_controller_view(cluster, reports: list[dict]) -> list[str]:
    """Controller mode (the broker names a controller in its runtime info): each report gets its group's
    ``controller`` state (masterEpoch, SyncStateSet, this broker's controller brokerId) and each slave row whether it
    is in the SyncStateSet; the footer names the active controller. Classic mode: nothing changes."""
    from client.errors import MQClientError
    from ctl.controller import ControllerView, controller_lines, controller_view

    names: dict[str, str] = {}  # report address -> brokerName, for brokers in controller mode
    addrs: set[str] = set()
    for one in reports:
        addr = one.get("masterAddr") if one["role"] != "SLAVE" else one["slaveAddr"]
        try:
            runtime = cluster.run(cluster.client.broker_runtime_info(addr))
        except MQClientError:
            continue
        if runtime.get("controllerAddr"):
            names[addr] = runtime.get("brokerName", "")
            addrs.add(runtime["controllerAddr"])
    if not addrs:
        return []
    view = controller_view(cluster, addrs, sorted(set(names.values())))
    for one in reports:
        addr = one.get("masterAddr") if one["role"] != "SLAVE" else one["slaveAddr"]
        group = view.groups.get(names.get(addr, "")) if isinstance(view, ControllerView) else None
        if group is None:
            continue
        one["controller"] = {"brokerName": group.broker_name, "controllerBrokerId": group.id_of(addr),
                             "masterEpoch": group.master_epoch, "syncStateSet": group.sync_state_set,
                             "syncStateSetEpoch": group.sync_state_set_epoch}
        for slave in one.get("slaves", []):
            sid = group.id_of(slave["slaveAddr"])
            slave["inSyncStateSet"] = sid in group.sync_state_set if sid is not None else None
    return controller_lines(view, sorted(set(names.values())), True)


def report_lines(report: dict) -> list[str]:
    ctl_state = report.get("controller")
    extra = []
    if ctl_state is not None:
        extra = [
            f"#BrokerName {ctl_state['brokerName']}",
            f"#ControllerBrokerId {ctl_state['controllerBrokerId']}",
            f"#MasterEpoch {ctl_state['masterEpoch']}",
            f"#SyncStateSet {ctl_state['syncStateSet']} (epoch {ctl_state['syncStateSetEpoch']})",
        ]
    if report["role"] == "SLAVE":
        return [
            f"#SlaveAddr {report['slaveAddr']}",
            f"#MasterAddr {report['masterAddr'] or 'N/A'}",
            f"#Connected {'true' if report['connected'] else 'false'}",
            f"#Status {report['status']}",
            f"#SinceLastRead {since(report['sinceLastReadMs'])}",
            f"#CommitLogMaxOffset {report['commitLogMaxOffset']}",
            f"#LastReadTime {report['lastReadTime']}",
            f"#LastWriteTime {report['lastWriteTime']}",
            *extra,
        ]
    columns = SLAVE_COLUMNS + ([Column("InSyncStateSet", "inSyncStateSet")] if ctl_state is not None else [])
    return [
        f"#MasterAddr {report['masterAddr']}",
        f"#MasterCommitLogMaxOffset {report['masterCommitLogMaxOffset']}",
        f"#SlaveNum {report['slaveNum']}",
        f"#InSyncSlaveNum {report['inSyncSlaveNum']}",
        *extra,
        *format_table(columns, report["slaves"]),
    ]


@app.command("haStatus")
def ha_status(
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    broker_addr: BrokerAddrOpt = None,
    cluster_name: ClusterOpt = None,
    json: JsonOpt = False,
    interval: IntervalOpt = None,
    count: CountOpt = None,
):
    """Replication status of a broker (-b addr) or of every master of a cluster (-c)."""
    one_target(broker_addr, cluster_name)
    out = Output(json)

    def report(cluster: Cluster) -> list[str]:
        addrs = cluster.target_addrs(broker_addr, cluster_name)
        reports = [ha_report(addr, cluster.run(cluster.client.ha_status(addr))) for addr in addrs]
        footer = add_controller_view(cluster, reports)
        lines: list[str] = []
        for i, one in enumerate(reports):
            if i:
                lines.append("")
            lines += report_lines(one)
        return out.lines(reports, lines + footer)

    repeat_on_cluster(namesrv, report, interval, count, title="haStatus")
