"""Topic commands: topicList, topicRoute, topicStatus, updateTopic, deleteTopic (mqadmin's topic/ package)."""

from __future__ import annotations

from typing import Annotated

import typer

from common.perm import PERM_READ, PERM_RW, PERM_WRITE, perm_text
from ctl.options import DEFAULT_NAMESRV, BrokerAddrOpt, ClusterOpt, JsonOpt, NamesrvOpt, TopicOpt, one_target, truthy
from ctl.output import Column, Output, format_table, human_time

app = typer.Typer()

UPDATE_PERMS = (PERM_WRITE, PERM_READ, PERM_RW)  # the perms updateTopic -p takes: 2 (W), 4 (R), 6 (RW)
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


def route_json(route: dict) -> dict:
    """TopicRouteData as mqadmin prints it (brokerAddrs keys as strings, groups sorted by name)."""
    out = {
        "brokerDatas": [
            {
                "cluster": b.get("cluster", ""),
                "brokerName": b["brokerName"],
                "brokerAddrs": {str(k): v for k, v in sorted(b["brokerAddrs"].items())},
            }
            for b in sorted(route["brokerDatas"], key=lambda b: b["brokerName"])
        ],
        "queueDatas": [
            {
                "brokerName": q["brokerName"],
                "readQueueNums": int(q.get("readQueueNums", 0)),
                "writeQueueNums": int(q.get("writeQueueNums", 0)),
                "perm": int(q.get("perm", 0)),
                "topicSysFlag": int(q.get("topicSysFlag", 0)),
            }
            for q in sorted(route["queueDatas"], key=lambda q: q["brokerName"])
        ],
        "filterServerTable": route.get("filterServerTable") or {},
    }
    if route.get("orderTopicConf"):
        out["orderTopicConf"] = route["orderTopicConf"]
    return out


def topic_config_text(topic: str, *, read_queue_nums: int, write_queue_nums: int, perm: int, order: bool) -> str:
    """mqadmin prints the TopicConfig it sent after "create topic to <addr> success."."""
    return (
        f"TopicConfig [topicName={topic}, readQueueNums={read_queue_nums}, writeQueueNums={write_queue_nums}, "
        f"perm={perm_text(perm)}, topicSysFlag=0, order={'true' if order else 'false'}]"
    )


@app.command("topicList")
def topic_list(namesrv: NamesrvOpt = DEFAULT_NAMESRV, json: JsonOpt = False):
    """Fetch all topic names from the nameserver."""
    from ctl.rpc import Cluster

    with Cluster(namesrv) as cluster:
        topics = cluster.run(cluster.client.all_topics())
    Output(json).show(topics, topics)


@app.command("topicRoute")
def topic_route(
    topic: TopicOpt,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
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
def topic_status(topic: TopicOpt, namesrv: NamesrvOpt = DEFAULT_NAMESRV, json: JsonOpt = False):
    """Examine a topic's queues: min and max offsets per queue on every broker group (the master if listed)."""
    from ctl.rpc import Cluster, read_addr

    rows = []
    with Cluster(namesrv) as cluster:
        for data in sorted(cluster.route(topic)["brokerDatas"], key=lambda b: b["brokerName"]):
            _, addr = read_addr(data["brokerAddrs"])
            stats = cluster.run(cluster.client.topic_stats(addr, topic))
            for q in stats.queues:
                rows.append(
                    {
                        "brokerName": stats.broker_name or data["brokerName"],
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
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    broker_addr: BrokerAddrOpt = None,
    cluster_name: ClusterOpt = None,
    read_queue_nums: Annotated[int, typer.Option("-r", "--readQueueNums", min=1, help="Read queues per broker.")] = 8,
    write_queue_nums: Annotated[
        int, typer.Option("-w", "--writeQueueNums", min=1, help="Write queues per broker.")
    ] = 8,
    perm: Annotated[int, typer.Option("-p", "--perm", help="2 = W, 4 = R, 6 = RW.")] = 6,
    order: Annotated[str, typer.Option("-o", "--order", help="true: an ordered topic.")] = "false",
    json: JsonOpt = False,
):
    """Update or create a topic on one broker (-b) or on every master of a cluster (-c)."""
    one_target(broker_addr, cluster_name)
    if perm not in UPDATE_PERMS:
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
    order_conf = None
    with Cluster(namesrv) as cluster:
        if broker_addr:  # mqadmin asks the nameserver for the broker's name only to write the order conf
            refs = [_broker_at(cluster, broker_addr)] if config["order"] else []
            addrs = [broker_addr]
        else:
            refs = cluster.masters(cluster_name)
            addrs = [r.addr for r in refs]
        for addr in addrs:
            cluster.run(cluster.client.update_topic(addr, topic, **config))
            done.append(addr)
            out.progress(f"create topic to {addr} success.")
        if config["order"]:
            order_conf = _write_order_conf(cluster, topic, refs, write_queue_nums, whole_cluster=broker_addr is None)
            scope = "broker" if broker_addr else "cluster"
            out.progress(f"set {scope} orderConf. isOrder=true, orderConf=[{order_conf}]")
    out.progress(topic_config_text(topic, **config))
    data = {
        "brokers": done,
        "topicConfig": {
            "topicName": topic,
            "readQueueNums": read_queue_nums,
            "writeQueueNums": write_queue_nums,
            "perm": perm,
            "order": config["order"],
        },
    }
    if order_conf is not None:
        data["orderConf"] = order_conf
    out.show(data, [])


def _broker_at(cluster, addr: str):
    """The registered broker listening at ``addr`` (mqadmin's fetchBrokerNameByAddr)."""
    from ctl.errors import UnknownName

    for ref in cluster.brokers():
        if ref.addr == addr:
            return ref
    known = [r.addr for r in cluster.brokers()]
    raise UnknownName("broker", addr, known, hint="pass -b with an address from `mqctl clusterList`")


def _write_order_conf(cluster, topic: str, refs, queue_nums: int, *, whole_cluster: bool) -> str:
    """mqadmin's createOrUpdateOrderConf: the nameservers' KV entry ORDER_TOPIC_CONFIG/<topic> becomes
    ``brokerName:queueNums`` joined by ';', which routes carry as orderTopicConf. With -c the entry is the
    cluster's masters; with -b this broker's part replaces its old one and the other brokers' parts stay."""
    from client.admin import ORDER_TOPIC_CONFIG

    parts: dict[str, str] = {}
    if not whole_cluster:
        old = cluster.run(cluster.client.get_kv_config(ORDER_TOPIC_CONFIG, topic)) or ""
        for part in filter(None, old.split(";")):
            parts[part.split(":", 1)[0]] = part
    for ref in refs:
        parts[ref.broker_name] = f"{ref.broker_name}:{queue_nums}"
    value = ";".join(parts.values())
    _on_every_namesrv(cluster, "PUT_KV_CONFIG", {"namespace": ORDER_TOPIC_CONFIG, "key": topic, "value": value})
    return value


def _on_every_namesrv(cluster, name: str, ext: dict[str, str]) -> None:
    """Send a write to every nameserver of -n; Refused naming the first that says no."""
    from ctl.errors import Refused
    from remoting.codes import RequestCode

    for addr, response in cluster.each_namesrv(RequestCode[name], ext):
        if response.code != 0:
            raise Refused(f"nameserver {addr}", name, response.code, response.remark or "")


@app.command("deleteTopic")
def delete_topic(
    topic: TopicOpt,
    cluster_name: Annotated[str, typer.Option("-c", "--clusterName", help="Cluster name: every master of it.")],
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    json: JsonOpt = False,
):
    """Delete a topic from every master of a cluster and from the nameservers (with its order conf)."""
    from client.admin import ORDER_TOPIC_CONFIG
    from ctl.rpc import Cluster

    out = Output(json)
    with Cluster(namesrv) as cluster:
        masters = cluster.masters(cluster_name)
        for ref in masters:
            cluster.run(cluster.client.delete_topic(ref.addr, topic))
        out.progress(f"delete topic [{topic}] from cluster [{cluster_name}] success.")
        _on_every_namesrv(cluster, "DELETE_TOPIC_IN_NAMESRV", {"topic": topic, "clusterName": cluster_name})
        # a topic created again under this name must not inherit the old one's order conf
        _on_every_namesrv(cluster, "DELETE_KV_CONFIG", {"namespace": ORDER_TOPIC_CONFIG, "key": topic})
        out.progress(f"delete topic [{topic}] from NameServer success.")
    out.show({"topic": topic, "cluster": cluster_name, "brokers": [r.addr for r in masters]}, [])
