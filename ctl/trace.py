"""queryMsgTraceById (mqadmin's QueryMsgTraceByIdSubCommand): a message's life from its trace records.

The trace records of a message are found by a key query for its msgId on the trace topic (the trace messages'
KEYS hold the traced msgIds, ``client.trace_codec``). One table for the send (``Pub``: producer group, client
host, send time, cost, status) with pyrmq's two extra columns, where the message is stored (store host) and when
(its store time, read from the brokers' index by msgId); then one table per consumer group with a row per
delivery (``SubBefore`` paired with its ``SubAfter`` by requestId: consume time, cost, status, retry times). A
delivery whose SubAfter is missing (the consumer is still at it, or died) shows status ``unknown``. The client
host is the trace message's born host (the traced client sends its own trace messages), as in RocketMQ's TraceView.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ctl.options import DEFAULT_NAMESRV, JsonOpt, NamesrvOpt
from ctl.output import Column, Output, format_table, human_time

app = typer.Typer()

PUB_COLUMNS = [Column("Type", "type"), Column("ProducerGroup", "group"), Column("ClientHost", "clientHost"),
               Column("SendTime", "time"), Column("CostTimes", "cost"), Column("Status", "status"),
               Column("StoreHost", "storeHost"), Column("StoreTime", "storeTime")]
SUB_COLUMNS = [Column("Type", "type"), Column("ConsumerGroup", "group"), Column("ClientHost", "clientHost"),
               Column("ConsumerTime", "time"), Column("CostTimes", "cost"), Column("Status", "status"),
               Column("RetryTimes", "retryTimes")]


def _status(success: bool) -> str:
    return "success" if success else "failed"


def trace_rows(msg_id: str, trace_messages: list) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Pub rows, delivery rows) for ``msg_id`` from the stored trace messages; times as epoch ms.

    A record stored twice (a trace message sent again after a timeout) counts once."""
    from client.trace_codec import TraceCodecError, TraceType, decode

    pubs: dict[tuple, dict[str, Any]] = {}
    befores: dict[tuple[str, str], dict[str, Any]] = {}
    afters: dict[tuple[str, str], Any] = {}
    for m in sorted(trace_messages, key=lambda m: (m.store_timestamp, m.physical_offset)):
        try:
            records = decode(m.body.decode("utf-8", "replace"))
        except TraceCodecError:
            continue  # not a trace message pyrmq can read: skip it, as TraceView does
        host = m.born_host[0]
        for r in records:
            if r.msg_id != msg_id:
                continue
            if r.type is TraceType.PUB:
                pubs.setdefault((r.timestamp, r.group, r.store_host), {
                    "type": "Pub", "group": r.group, "clientHost": r.client_host or host, "time": r.timestamp,
                    "costMs": r.cost_ms, "status": _status(r.success), "storeHost": r.store_host,
                    "topic": r.topic, "offsetMsgId": r.offset_msg_id})
            elif r.type is TraceType.SUB_BEFORE:
                befores.setdefault((r.request_id, r.msg_id), {
                    "type": "Sub", "group": r.group, "clientHost": host, "time": r.timestamp,
                    "retryTimes": r.retry_times})
            else:
                afters.setdefault((r.request_id, r.msg_id), r)
    subs = []
    for key, row in befores.items():
        after = afters.pop(key, None)
        row["costMs"] = None if after is None else after.cost_ms
        row["status"] = "unknown" if after is None else _status(after.success)
        subs.append(row)
    for after in afters.values():  # its SubBefore is not stored (lost, or beyond maxNum)
        subs.append({"type": "Sub", "group": "", "clientHost": "", "time": after.timestamp, "retryTimes": None,
                     "costMs": after.cost_ms, "status": _status(after.success)})
    subs.sort(key=lambda r: (r["group"], r["time"]))
    return sorted(pubs.values(), key=lambda r: r["time"]), subs


def _store_time(namesrv: str, topic: str, msg_id: str) -> tuple[int, str] | None:
    """(store time, store host) of the traced message, by its msgId in the brokers' index; None when no broker
    has it (the topic is gone, or the message expired: the trace still shows)."""
    from common.errors import PyrmqError
    from ctl.rpc import Cluster, read_addr

    found = []
    try:
        with Cluster(namesrv) as cluster:
            for data in cluster.route(topic)["brokerDatas"]:
                _, addr = read_addr({int(k): v for k, v in data["brokerAddrs"].items()})
                found += cluster.run(cluster.client.query_message(addr, topic, msg_id, max_num=32, unique=True))
    except PyrmqError:  # TopicNotFound, a broker that does not answer, ...
        return None
    if not found:
        return None
    m = min(found, key=lambda m: m.store_timestamp)  # the first stored copy
    return m.store_timestamp, "{}:{}".format(*m.store_host)


def _cost(ms: int | None) -> str | None:
    return None if ms is None else f"{ms}ms"


@app.command("queryMsgTraceById")
def query_msg_trace_by_id(
    msg_id: Annotated[str, typer.Option("-i", "--msgId", help="The message id a producer reported (UNIQ_KEY).")],
    trace_topic: Annotated[str, typer.Option("-t", "--traceTopic", help="The trace topic.")] = "RMQ_SYS_TRACE_TOPIC",
    begin: Annotated[int, typer.Option("-b", "--beginTimestamp", help="Traces stored at or after (ms).")] = 0,
    end: Annotated[int, typer.Option("-e", "--endTimestamp", help="Traces stored at or before (ms).")] = 2**63 - 1,
    max_num: Annotated[int, typer.Option("--num", "--maxNum", min=1, max=64,
                                         help="At most this many trace messages (64).")] = 64,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    json: JsonOpt = False,
):
    """Show a message's trace: who sent it, where it is stored, which groups consumed it, when, how."""
    from ctl.query import query_all

    msg_id = msg_id.strip()
    found = query_all(namesrv, trace_topic, msg_id, unique=False, max_num=max_num, begin_ms=begin, end_ms=end)
    pubs, subs = trace_rows(msg_id, found)
    for row in pubs:
        stored = _store_time(namesrv, row["topic"], msg_id) if row["topic"] else None
        row["storeTime"] = stored[0] if stored else None
        if stored and not row["storeHost"]:
            row["storeHost"] = stored[1]
    if json:
        Output(True).show({"msgId": msg_id, "pub": pubs, "sub": subs}, [])
        return
    lines: list[str] = []
    for row in pubs:
        shown = {**row, "time": human_time(row["time"]), "cost": _cost(row["costMs"]),
                 "storeTime": human_time(row["storeTime"]) if row["storeTime"] else None}
        lines += [*format_table(PUB_COLUMNS, [shown]), ""]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in subs:
        groups.setdefault(row["group"], []).append(
            {**row, "time": human_time(row["time"]), "cost": _cost(row["costMs"])})
    for rows in groups.values():
        lines += [*format_table(SUB_COLUMNS, rows), ""]
    if not pubs and not subs:
        lines.append(f"no trace record of {msg_id} in the {len(found)} trace messages found; check the msgId")
    Output(False).show(None, lines)
