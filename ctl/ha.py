"""haStatus: replication state per master (5.x HAStatusSubCommand), from GET_BROKER_HA_STATUS (907).

On a master: a header block (#MasterAddr, #MasterCommitLogMaxOffset, #SlaveNum, #InSyncSlaveNum) and one row
per slave connection with RocketMQ's status words, "OK" and "Fall Behind", plus "Disconnected" for a slave the
master still remembers but no longer hears. On a slave (-b slave address): its view of the master.
"""

from __future__ import annotations

import typer

from ctl.options import BrokerAddrOpt, ClusterOpt, JsonOpt, NamesrvOpt, one_target
from ctl.output import Column, Output, format_table, human_time

app = typer.Typer()

STATUS_WORDS = {"OK": "OK", "FALL_BEHIND": "Fall Behind", "DISCONNECTED": "Disconnected"}
SLAVE_COLUMNS = [
    Column("SlaveAddr", "slaveAddr"),
    Column("SlaveAckOffset", "slaveAckOffset"),
    Column("Diff", "diff"),
    Column("Status", "status"),
    Column("TransferFromWhere", "transferFromWhere"),
]


def status_word(state: str) -> str:
    return STATUS_WORDS.get(state.upper(), state)


def ha_report(addr: str, status) -> dict:
    if status.role.upper() == "SLAVE":
        return {
            "role": "SLAVE",
            "slaveAddr": addr,
            "masterAddr": status.master_ha_addr,
            "connected": status.connected,
            "commitLogMaxOffset": status.commitlog_max_offset,
            "lastReadTime": human_time(status.last_read_timestamp),
            "lastWriteTime": human_time(status.last_write_timestamp),
            "replicatedBytes": status.replicated_bytes,
        }
    slaves = [
        {
            "slaveAddr": s.slave_addr,
            "slaveAckOffset": s.ack_offset,
            "diff": s.lag_bytes if s.lag_bytes else status.commitlog_max_offset - s.ack_offset,
            "status": status_word(s.state),
            "transferFromWhere": s.transfer_from,
        }
        for s in status.slaves
    ]
    return {
        "role": status.role,
        "masterAddr": addr,
        "masterCommitLogMaxOffset": status.commitlog_max_offset,
        "slaveNum": len(slaves),
        "inSyncSlaveNum": status.in_sync_slave_count,
        "slaves": slaves,
    }


def report_lines(report: dict) -> list[str]:
    if report["role"] == "SLAVE":
        return [
            f"#SlaveAddr {report['slaveAddr']}",
            f"#MasterAddr {report['masterAddr'] or 'N/A'}",
            f"#Connected {'true' if report['connected'] else 'false'}",
            f"#CommitLogMaxOffset {report['commitLogMaxOffset']}",
            f"#LastReadTime {report['lastReadTime']}",
            f"#LastWriteTime {report['lastWriteTime']}",
        ]
    return [
        f"#MasterAddr {report['masterAddr']}",
        f"#MasterCommitLogMaxOffset {report['masterCommitLogMaxOffset']}",
        f"#SlaveNum {report['slaveNum']}",
        f"#InSyncSlaveNum {report['inSyncSlaveNum']}",
        *format_table(SLAVE_COLUMNS, report["slaves"]),
    ]


@app.command("haStatus")
def ha_status(
    namesrv: NamesrvOpt = "127.0.0.1:9876",
    broker_addr: BrokerAddrOpt = None,
    cluster_name: ClusterOpt = None,
    json: JsonOpt = False,
):
    """Replication status of a broker (-b addr) or of every master of a cluster (-c)."""
    one_target(broker_addr, cluster_name)
    from ctl.rpc import Cluster

    with Cluster(namesrv) as cluster:
        addrs = [broker_addr] if broker_addr else [r.addr for r in cluster.masters(cluster_name)]
        reports = [ha_report(addr, cluster.run(cluster.client.ha_status(addr))) for addr in addrs]
    lines: list[str] = []
    for i, report in enumerate(reports):
        if i:
            lines.append("")
        lines += report_lines(report)
    Output(json).show(reports, lines)
