"""Topic commands: topicList, topicRoute, topicStatus, updateTopic, deleteTopic (mqadmin's topic/ package)."""

from __future__ import annotations

from typing import Annotated

import typer

from ctl.options import BrokerAddrOpt, ClusterOpt, JsonOpt, NamesrvOpt, TopicOpt, one_target, truthy
from ctl.output import Column, Output, format_table, human_time

app = typer.Typer()

PERM_NAMES = {2: "W", 4: "R", 6: "RW"}
ROUTE_COLUMNS = [
    Column("ClusterName", "clusterName"),
    Column("BrokerName", "brokerName"),
    Column("BrokerAddrs", "brokerAddrs"),
    Column("ReadQueue", "readQueueNums"),
    Column("WriteQueue", "writeQueueNums"),
    Column("Perm", "perm"),
]
STATUS_COLUMNS = [
    Column("Broker Name", "brokerName"),
    Column("QID", "queueId"),
    Column("Min Offset", "minOffset"),
    Column("Max Offset", "maxOffset"),
    Column("Last Updated", "lastUpdated"),
]


def perm_text(perm: int) -> str:
    """RocketMQ PermName.perm2String: R, W and X (inherit) flags, '-' for each one missing."""
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "-")


def route_json(route) -> dict:
    """TopicRouteData with mqadmin's field names."""
    return {
        "brokerDatas": [
            {
                "cluster": b.cluster,
                "brokerName": b.broker_name,
                "brokerAddrs": {str(k): v for k, v in sorted(b.broker_addrs.items())},
            }
            for b in sorted(route.broker_datas, key=lambda b: b.broker_name)
        ],
        "queueDatas": [
            {
                "brokerName": q.broker_name,
                "readQueueNums": q.read_queue_nums,
                "writeQueueNums": q.write_queue_nums,
                "perm": q.perm,
                "topicSysFlag": q.topic_sys_flag,
            }
            for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
        ],
    }


def topic_config_text(topic: str, *, read_queue_nums: int, write_queue_nums: int, perm: int, order: bool) -> str:
    """mqadmin prints the TopicConfig it sent after "create topic to <addr> success."."""
    return (
        f"TopicConfig [topicName={topic}, readQueueNums={read_queue_nums}, writeQueueNums={write_queue_nums}, "
        f"perm={perm_text(perm)}, topicSysFlag=0, order={'true' if order else 'false'}]"
    )


@app.command("topicList")
def topic_list(namesrv: NamesrvOpt = "127.0.0.1:9876", json: JsonOpt = False):
    """Fetch all topic names from the nameserver."""
    from ctl.rpc import Cluster

    with Cluster(namesrv) as cluster:
        topics = cluster.run(cluster.client.all_topics())
    Output(json).show(topics, topics)


@app.command("topicRoute")
def topic_route(
    topic: TopicOpt,
    namesrv: NamesrvOpt = "127.0.0.1:9876",
    list_format: Annotated[bool, typer.Option("-l", "--list", help="Print a table instead of JSON.")] = False,
    json: JsonOpt = False,
):
    """Examine a topic's route: JSON like mqadmin, or a table with -l."""
    from ctl.rpc import Cluster

    with Cluster(namesrv) as cluster:
        data = route_json(cluster.route(topic))
    if not list_format or json:
        Output(True).show(data, [])
        return
    clusters = {b["brokerName"]: b for b in data["brokerDatas"]}
    rows = []
    for q in data["queueDatas"]:
        broker = clusters.get(q["brokerName"], {"cluster": "-", "brokerAddrs": {}})
        rows.append(
            {
                "clusterName": broker["cluster"],
                "brokerName": q["brokerName"],
                "brokerAddrs": ",".join(f"{k}:{v}" for k, v in broker["brokerAddrs"].items()),
                "readQueueNums": q["readQueueNums"],
                "writeQueueNums": q["writeQueueNums"],
                "perm": q["perm"],
            }
        )
    total = {
        "clusterName": "Total:",
        "brokerName": len(rows),
        "brokerAddrs": "",
        "readQueueNums": sum(r["readQueueNums"] for r in rows),
        "writeQueueNums": sum(r["writeQueueNums"] for r in rows),
        "perm": "",
    }
    Output(False).show(rows, format_table(ROUTE_COLUMNS, [*rows, total]))


@app.command("topicStatus")
def topic_status(topic: TopicOpt, namesrv: NamesrvOpt = "127.0.0.1:9876", json: JsonOpt = False):
    """Examine a topic's queues: min and max offsets per queue on every broker group (the master if listed)."""
    from ctl.rpc import Cluster, read_addr

    rows = []
    with Cluster(namesrv) as cluster:
        for data in sorted(cluster.route(topic).broker_datas, key=lambda b: b.broker_name):
            _, addr = read_addr(data)
            stats = cluster.run(cluster.client.topic_stats(addr, topic))
            for q in sorted(stats.queues, key=lambda q: q.queue_id):
                rows.append(
                    {
                        "brokerName": stats.broker_name or data.broker_name,
                        "queueId": q.queue_id,
                        "minOffset": q.min_offset,
                        "maxOffset": q.max_offset,
                        "lastUpdated": human_time(q.last_update_timestamp),
                        "lastUpdatedMs": q.last_update_timestamp,
                    }
                )
    Output(json).table(STATUS_COLUMNS, rows)


@app.command("updateTopic")
def update_topic(
    topic: TopicOpt,
    namesrv: NamesrvOpt = "127.0.0.1:9876",
    broker_addr: BrokerAddrOpt = None,
    cluster_name: ClusterOpt = None,
    read_queue_nums: Annotated[int, typer.Option("-r", "--readQueueNums", min=1)] = 8,
    write_queue_nums: Annotated[int, typer.Option("-w", "--writeQueueNums", min=1)] = 8,
    perm: Annotated[int, typer.Option("-p", "--perm", help="2 = W, 4 = R, 6 = RW.")] = 6,
    order: Annotated[str, typer.Option("-o", "--order", help="true: an ordered topic.")] = "false",
    json: JsonOpt = False,
):
    """Update or create a topic on one broker (-b) or on every master of a cluster (-c)."""
    one_target(broker_addr, cluster_name)
    if perm not in PERM_NAMES:
        raise typer.BadParameter(f"{perm} is not 2 (W), 4 (R) or 6 (RW)", param_hint="-p")
    from ctl.rpc import Cluster

    config = {
        "read_queue_nums": read_queue_nums,
        "write_queue_nums": write_queue_nums,
        "perm": perm,
        "order": truthy(order),
    }
    out = Output(json)
    done = []
    with Cluster(namesrv) as cluster:
        addrs = [broker_addr] if broker_addr else [r.addr for r in cluster.masters(cluster_name)]
        for addr in addrs:
            cluster.run(cluster.client.update_topic(addr, topic, **config))
            done.append(addr)
            out.progress(f"create topic to {addr} success.")
    out.progress(topic_config_text(topic, **config))
    out.show(
        {
            "brokers": done,
            "topicConfig": {
                "topicName": topic,
                "readQueueNums": read_queue_nums,
                "writeQueueNums": write_queue_nums,
                "perm": perm,
                "order": config["order"],
            },
        },
        [],
    )


@app.command("deleteTopic")
def delete_topic(
    topic: TopicOpt,
    cluster_name: Annotated[str, typer.Option("-c", "--clusterName")],
    namesrv: NamesrvOpt = "127.0.0.1:9876",
    json: JsonOpt = False,
):
    """Delete a topic from every master of a cluster and from the nameservers."""
    from ctl.errors import Refused
    from ctl.rpc import Cluster
    from remoting.pb import namesrv_pb2

    out = Output(json)
    with Cluster(namesrv) as cluster:
        masters = cluster.masters(cluster_name)
        for ref in masters:
            cluster.run(cluster.client.delete_topic(ref.addr, topic))
        out.progress(f"delete topic [{topic}] from cluster [{cluster_name}] success.")
        request = namesrv_pb2.DeleteTopicRequest(topic=topic, cluster_name=cluster_name)
        for addr, response in cluster.each_namesrv("DeleteTopic", request):
            if response.code != 0:
                raise Refused(f"nameserver {addr}", "DeleteTopic", response.code, response.remark)
        out.progress(f"delete topic [{topic}] from NameServer success.")
    out.show({"topic": topic, "cluster": cluster_name, "brokers": [r.addr for r in masters]}, [])
