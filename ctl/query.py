"""queryMsgByKey and queryMsgByUniqueKey (mqadmin's message/ package): lookups in the brokers' message index.

Both ask every broker group of the topic's route, its master or, when the master is gone, its slave (each builds its
own index), with QUERY_MESSAGE, and merge the answers newest first, as RocketMQ's MQAdminImpl.queryMessage does.
queryMsgByKey prints mqadmin's ``#Message ID  #QID  #Offset`` table (the Message ID is the UNIQ_KEY a producer
reported); queryMsgByUniqueKey prints the message as queryMsgById does. Nothing found exits 1 with RocketMQ's
client error, ``NO_MESSAGE`` (208): "query message by key finished, but no message".
"""

from __future__ import annotations

from typing import Annotated

import typer

from ctl.options import DEFAULT_NAMESRV, JsonOpt, NamesrvOpt, TopicOpt
from ctl.output import Column, Output

app = typer.Typer()

NO_MESSAGE = 208
KEY_COLUMNS = [Column("#Message ID", "msgId"), Column("#QID", "queueId"), Column("#Offset", "queueOffset")]


def query_all(namesrv: str, topic: str, key: str, *, unique: bool, max_num: int, begin_ms: int, end_ms: int) -> list:
    """Every group's answer for ``key``, newest first, at most ``max_num``; typer.Exit(1) when none has it."""
    from ctl.rpc import Cluster, read_addr

    found = []
    with Cluster(namesrv) as cluster:
        for data in cluster.route(topic)["brokerDatas"]:
            _, addr = read_addr({int(k): v for k, v in data["brokerAddrs"].items()})
            found += cluster.run(cluster.client.query_message(
                addr, topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms, unique=unique))
    found.sort(key=lambda m: (m.store_timestamp, m.physical_offset), reverse=True)
    if not found:
        typer.echo(f"CODE: {NO_MESSAGE} DESC: query message by key finished, but no message (topic {topic}, "
                   f"{'msgId' if unique else 'key'} {key}); check the topic, the key and the time range", err=True)
        raise typer.Exit(1)
    return found[:max_num]


@app.command("queryMsgByKey")
def query_msg_by_key(
    topic: TopicOpt,
    key: Annotated[str, typer.Option("-k", "--msgKey", help="A key the producer set (KEYS).")],
    begin: Annotated[int, typer.Option("-b", "--beginTimestamp", help="Stored at or after (ms since the epoch).")] = 0,
    end: Annotated[int, typer.Option("-e", "--endTimestamp", help="Stored at or before (ms; default: no limit).")] = (
        2**63 - 1),
    max_num: Annotated[int, typer.Option("-c", "--maxNum", min=1, max=64, help="At most this many (64).")] = 64,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    json: JsonOpt = False,
):
    """Find messages by key in every broker's message index."""
    msgs = query_all(namesrv, topic, key, unique=False, max_num=max_num, begin_ms=begin, end_ms=end)
    rows = [{"msgId": m.properties.get("UNIQ_KEY", ""), "queueId": m.queue_id, "queueOffset": m.queue_offset}
            for m in msgs]
    Output(json).table(KEY_COLUMNS, rows)


@app.command("queryMsgByUniqueKey")
def query_msg_by_unique_key(
    topic: TopicOpt,
    msg_id: Annotated[str, typer.Option("-i", "--msgId", help="The message id a producer reported (UNIQ_KEY).")],
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    json: JsonOpt = False,
):
    """Show a message found by its UNIQ_KEY in the brokers' message index."""
    show_by_unique_key(namesrv, topic, msg_id.strip(), json)


def show_by_unique_key(namesrv: str, topic: str, msg_id: str, json: bool) -> None:
    from ctl.message_view import message_lines
    from remoting.message_codec import offset_msg_id

    msgs = query_all(namesrv, topic, msg_id, unique=True, max_num=32, begin_ms=0, end_ms=2**63 - 1)
    out = Output(json)
    for msg in msgs[:1]:  # a message sent once has one record; a resend is the same message
        data, lines = message_lines(msg, offset_msg_id(msg.store_host, msg.physical_offset))
        data["msgId"] = msg_id
        out.show(data, [f"{'Message ID:':<20} {msg_id}", *lines])
