"""Subscription-group commands: updateSubGroup, deleteSubGroup, consumerProgress (mqadmin consumer/ package).

updateSubGroup keeps mqadmin's CLI defaults, which differ from the server's: consumeFromMinEnable and
consumeBroadcastEnable are sent false unless given, and the broker replaces the whole config, so an option
left out reverts to its default (spec/rocketmq-replication.md §8).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ctl.options import DEFAULT_NAMESRV, BrokerAddrOpt, ClusterOpt, GroupOpt, JsonOpt, NamesrvOpt, one_target, truthy
from ctl.output import Column, Output, format_table, human_time
from ctl.watch import CountOpt, IntervalOpt, repeat_on_cluster
from remoting.codes import ResponseCode

if TYPE_CHECKING:
    from ctl.rpc import Cluster

app = typer.Typer()

PROGRESS_COLUMNS = [
    Column("Topic", "topic"),
    Column("Broker Name", "brokerName"),
    Column("QID", "queueId"),
    Column("Broker Offset", "brokerOffset"),
    Column("Consumer Offset", "consumerOffset"),
    Column("Diff", "diff"),
    Column("Inflight", "inflight"),
    Column("LastTime", "lastTime"),
]


def _flag(value: str) -> str:
    return "true" if value else "false"


def group_config_json(cfg) -> dict:
    return {
        "groupName": cfg.group_name,
        "consumeEnable": cfg.consume_enable,
        "consumeFromMinEnable": cfg.consume_from_min_enable,
        "consumeBroadcastEnable": cfg.consume_broadcast_enable,
        "consumeMessageOrderly": cfg.consume_message_orderly,
        "retryQueueNums": cfg.retry_queue_nums,
        "retryMaxTimes": cfg.retry_max_times,
        "brokerId": cfg.broker_id,
        "whichBrokerWhenConsumeSlowly": cfg.which_broker_when_consume_slowly,
        "notifyConsumerIdsChangedEnable": cfg.notify_consumer_ids_changed_enable,
    }


def _fields(cfg) -> dict:
    """The config as AdminClient.update_subscription_group's keyword arguments."""
    import dataclasses

    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "group_name"}


def group_config_text(cfg) -> str:
    fields = ", ".join(f"{k}={_flag(v) if isinstance(v, bool) else v}" for k, v in group_config_json(cfg).items())
    return f"SubscriptionGroupConfig [{fields}]"


@app.command("updateSubGroup")
def update_sub_group(
    group: GroupOpt,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    broker_addr: BrokerAddrOpt = None,
    cluster_name: ClusterOpt = None,
    consume_enable: Annotated[str, typer.Option("-s", "--consumeEnable", help="true: the group may consume.")] = "true",
    consume_from_min: Annotated[
        str, typer.Option("-m", "--consumeFromMinEnable", help="true: a new consumer starts at the min offset.")
    ] = "false",
    consume_broadcast: Annotated[
        str, typer.Option("-d", "--consumeBroadcastEnable", help="true: broadcast consumption.")
    ] = "false",
    consume_orderly: Annotated[
        str,
        typer.Option(
            "-o", "--consumeMessageOrderly", help="true: RocketMQ 5 clients of the group pop in order (FIFO)."
        ),
    ] = "false",
    retry_queue_nums: Annotated[
        int, typer.Option("-q", "--retryQueueNums", min=0, help="Queues of the group's %RETRY% topic.")
    ] = 1,
    retry_max_times: Annotated[
        int, typer.Option("-r", "--retryMaxTimes", min=-1, help="Redeliveries before the DLQ.")
    ] = 16,
    broker_id: Annotated[int, typer.Option("-i", "--brokerId", min=0, help="Broker id to consume from.")] = 0,
    slowly_broker_id: Annotated[
        int, typer.Option("-w", "--whichBrokerWhenConsumeSlowly", min=0, help="Broker id to read from when behind.")
    ] = 1,
    notify_ids_changed: Annotated[
        str, typer.Option("-a", "--notifyConsumerIdsChanged", help="true: tell consumers when the group changes.")
    ] = "true",
    json: JsonOpt = False,
):
    """Update or create a subscription group on one broker (-b) or every master of a cluster (-c)."""
    one_target(broker_addr, cluster_name)
    from client.admin_bodies import SubscriptionGroupConfig
    from client.errors import MQClientError
    from ctl.rpc import Cluster

    cfg = SubscriptionGroupConfig(
        group_name=group,
        consume_enable=truthy(consume_enable),
        consume_from_min_enable=truthy(consume_from_min),
        consume_broadcast_enable=truthy(consume_broadcast),
        consume_message_orderly=truthy(consume_orderly),
        retry_queue_nums=retry_queue_nums,
        retry_max_times=retry_max_times,
        broker_id=broker_id,
        which_broker_when_consume_slowly=slowly_broker_id,
        notify_consumer_ids_changed_enable=truthy(notify_ids_changed),
    )
    out = Output(json)
    done, failed = [], []
    with Cluster(namesrv) as cluster:
        addrs = cluster.target_addrs(broker_addr, cluster_name)
        for addr in addrs:
            try:
                cluster.run(cluster.client.update_subscription_group(addr, group, **_fields(cfg)))
            except MQClientError as exc:
                if broker_addr:
                    raise
                # mqadmin -c keeps going when one master fails; report it and fail at the end
                out.warning(str(exc))
                failed.append(addr)
                continue
            done.append(addr)
            out.progress(f"create subscription group to {addr} success.")
    out.progress(group_config_text(cfg))
    out.show({"brokers": done, "failed": failed, "config": group_config_json(cfg)}, [])
    if failed:
        raise typer.Exit(1)


@app.command("deleteSubGroup")
def delete_sub_group(
    group: GroupOpt,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    broker_addr: BrokerAddrOpt = None,
    cluster_name: ClusterOpt = None,
    remove_offset: Annotated[str, typer.Option("-r", "--removeOffset", help="true: delete its offsets too.")] = "false",
    json: JsonOpt = False,
):
    """Delete a subscription group from one broker (-b) or every master of a cluster (-c)."""
    one_target(broker_addr, cluster_name)
    from ctl.rpc import Cluster

    out = Output(json)
    with Cluster(namesrv) as cluster:
        addrs = cluster.target_addrs(broker_addr, cluster_name)
        for addr in addrs:
            cluster.run(cluster.client.delete_subscription_group(addr, group, remove_offset=truthy(remove_offset)))
            where = f" in cluster [{cluster_name}]" if cluster_name else ""
            out.progress(f"delete subscription group [{group}] from broker [{addr}]{where} success.")
    out.show({"group": group, "brokers": addrs, "removeOffset": truthy(remove_offset)}, [])


GROUPS_COLUMNS = [
    Column("Group", "group"),
    Column("Count", "count"),
    Column("Version", "version"),
    Column("Type", "consumeType"),
    Column("Model", "messageModel"),
    Column("TPS", "consumeTps"),
    Column("Diff Total", "diffTotal"),
]
CONNECTION_COLUMNS = [
    Column("ClientId", "clientId"),
    Column("ClientAddr", "clientAddr"),
    Column("Language", "language"),
    Column("Version", "version"),
]
SUBSCRIPTION_COLUMNS = [Column("Topic", "topic"), Column("SubExpression", "subExpression")]
RETRY_PREFIX = "%RETRY%"
# A broker that never saw the group or topic answers one of these: "nothing here", not a failure.
NOT_FOUND_CODES = (
    ResponseCode.QUERY_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_NOT_EXIST,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    ResponseCode.TOPIC_NOT_EXIST,
)


def progress_rows(cluster, group: str, topic: str | None) -> tuple[list[dict], float]:
    """Per-queue progress of ``group``, asking each broker group once: its master if listed, else a slave."""
    from client.errors import BrokerError
    from ctl.rpc import read_addr

    rows, tps = [], 0.0
    for name in cluster.broker_names():
        _, addr = read_addr(cluster.broker_group(name).broker_addrs)
        try:
            stats = cluster.run(cluster.client.consume_stats(addr, group, topic or ""))
        except BrokerError as exc:
            if exc.code in NOT_FOUND_CODES:
                continue
            raise
        tps += stats.consume_tps
        for q in stats.queues:
            rows.append(
                {
                    "topic": q.topic,
                    "brokerName": q.broker_name or name,
                    "queueId": q.queue_id,
                    "brokerOffset": q.broker_offset,
                    "consumerOffset": q.consumer_offset,
                    "diff": q.broker_offset - q.consumer_offset,
                    "inflight": q.inflight,  # RocketMQ 5: received by a pop consumer (v2 client), not acked yet
                    "lastTime": human_time(q.last_timestamp),
                    "readFrom": addr,
                }
            )
    rows.sort(key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
    return rows, tps


def known_groups(cluster) -> set[str]:
    """Every consumer group the cluster knows of: subscription groups, groups with committed offsets, and the
    groups of ``%RETRY%<group>`` topics (what mqadmin looks at). A RocketMQ client that only heartbeats and
    commits offsets shows up in the last two even where no subscription group was created for it."""
    from ctl.rpc import read_addr

    groups: set[str] = set()
    for name in cluster.broker_names():
        _, addr = read_addr(cluster.broker_group(name).broker_addrs)
        groups.update(g.group_name for g in cluster.run(cluster.client.all_subscription_groups(addr)).groups)
        groups.update(cluster.run(cluster.client.all_consumer_offsets(addr)).groups())
    groups.update(
        t.removeprefix(RETRY_PREFIX) for t in cluster.run(cluster.client.all_topics()) if t.startswith(RETRY_PREFIX)
    )
    return groups


def connections(cluster, group: str):
    """The group's consumer connections on every broker group, merged by clientId (mqadmin reads one broker;
    a client connects to every broker it consumes from, so the union is the same set, robust to one being down).
    None when no broker knows a connected client of the group."""
    from client.errors import BrokerError
    from ctl.rpc import read_addr

    merged = None
    for name in cluster.broker_names():
        _, addr = read_addr(cluster.broker_group(name).broker_addrs)
        try:
            found = cluster.run(cluster.client.consumer_connection(addr, group))
        except BrokerError as exc:
            if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue
            raise
        if merged is None:
            merged = found
            continue
        have = {c.client_id for c in merged.connections}
        merged.connections += [c for c in found.connections if c.client_id not in have]
        merged.subscriptions.update(found.subscriptions)
    return merged


def all_groups_rows(cluster) -> list[dict]:
    """mqadmin's consumerProgress without -g: one row per group that has committed offsets."""
    rows = []
    for group in sorted(known_groups(cluster)):
        queues, tps = progress_rows(cluster, group, None)
        if not queues:
            continue
        conn = connections(cluster, group)
        first = conn.connections[0] if conn is not None and conn.connections else None
        rows.append(
            {
                "group": group,
                "count": len(conn.connections) if conn is not None else 0,
                "version": f"{first.language}:{first.version}" if first is not None else "OFFLINE",
                "consumeType": _consume_type(conn.consume_type) if conn is not None else "",
                "messageModel": conn.message_model if conn is not None else "",
                "consumeTps": tps,
                "diffTotal": sum(q["diff"] for q in queues),
            }
        )
    return rows


def _consume_type(wire: str) -> str:
    """ConsumeType as mqadmin prints it: CONSUME_PASSIVELY is a push consumer, CONSUME_ACTIVELY a pull one."""
    return {"CONSUME_PASSIVELY": "PUSH", "CONSUME_ACTIVELY": "PULL"}.get(wire, wire)


@app.command("consumerProgress")
def consumer_progress(
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    group: Annotated[str | None, typer.Option("-g", "--groupName", help="Consumer group (default: all).")] = None,
    topic: Annotated[str | None, typer.Option("-t", "--topic", help="Only this topic (with -g).")] = None,
    json: JsonOpt = False,
    interval: IntervalOpt = None,
    count: CountOpt = None,
):
    """Query consumer progress: per queue of one group (-g), or one line per group.

    Each broker group is asked once: its master when the nameserver lists one, else a slave.
    """
    out = Output(json)

    def report(cluster: Cluster) -> list[str]:
        if group is None:
            return out.table_lines(GROUPS_COLUMNS, all_groups_rows(cluster))
        return progress_lines(out, group, topic, *progress_rows(cluster, group, topic))

    repeat_on_cluster(namesrv, report, interval, count, title="consumerProgress")


def progress_lines(out: Output, group: str, topic: str | None, rows: list[dict], tps: float) -> list[str]:
    from ctl.errors import CtlError

    if not rows:
        raise CtlError(
            f"no consume progress for group {group}" + (f" on topic {topic}" if topic else ""),
            hint="the group has committed no offset yet; consume first (mqctl consumeMessage -g ...) or check the name",
        )
    diff_total = sum(r["diff"] for r in rows)
    inflight_total = sum(r["inflight"] for r in rows)
    if out.json_mode:
        data = {"group": group, "consumeTps": tps, "diffTotal": diff_total, "inflightTotal": inflight_total,
                "queues": rows}
        return out.lines(data, [])
    footer = ["", f"Consume TPS: {tps:.2f}", f"Inflight Total: {inflight_total}", f"Diff Total: {diff_total}"]
    return out.table_lines(PROGRESS_COLUMNS, rows, footer=footer)


@app.command("consumerConnection")
def consumer_connection(
    group: GroupOpt,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    broker_addr: BrokerAddrOpt = None,
    json: JsonOpt = False,
):
    """Query a consumer group's connected clients and their subscriptions (all broker groups, or -b one broker)."""
    from client.errors import BrokerError
    from ctl.errors import CtlError
    from ctl.rpc import Cluster

    with Cluster(namesrv) as cluster:
        if broker_addr:
            try:
                conn = cluster.run(cluster.client.consumer_connection(broker_addr, group))
            except BrokerError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                conn = None
        else:
            conn = connections(cluster, group)
    if conn is None or not conn.connections:
        raise CtlError(
            f"no consumer of group {group} is connected" + (f" to {broker_addr}" if broker_addr else ""),
            hint="start a consumer of the group, or check the name with `mqctl consumerProgress`",
        )
    clients = [
        {"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language, "version": c.version}
        for c in conn.connections
    ]
    subs = [{"topic": t, "subExpression": e} for t, e in conn.subscriptions.items()]
    data = {
        "group": group,
        "connections": clients,
        "subscriptions": subs,
        "consumeType": conn.consume_type,
        "messageModel": conn.message_model,
        "consumeFromWhere": conn.consume_from_where,
    }
    lines = [
        *format_table(CONNECTION_COLUMNS, clients),
        "",
        "Below is subscription:",
        *format_table(SUBSCRIPTION_COLUMNS, subs),
        "",
        f"ConsumeType: {conn.consume_type}",
        f"MessageModel: {conn.message_model}",
        f"ConsumeFromWhere: {conn.consume_from_where}",
    ]
    Output(json).show(data, lines)
