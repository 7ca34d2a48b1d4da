"""Smoke-test commands: sendMessage and consumeMessage (mqadmin's message/ package).

sendMessage sends one message to a writable queue of a master, the one given with -b/-i or a random one, and
shows the SendResult (--count sends many, one queue after the other from a random one, with progress on stderr);
it builds the message with the SDK (client.message.Message, so UNIQ_KEY is RocketMQ's) and sends it with
AdminClient.send_message (SEND_MESSAGE_V2 to that queue), because the SDK Producer picks queues itself.
consumeMessage is the SDK PullConsumer: it follows the brokers' read advice (--from-slave starts each queue on
the slave), starts at the group's committed offset (or the queue's minimum) and commits what it printed, to
the master while it answers, else to the slave, so consumerProgress shows the group caught up afterwards.
With -o it reads from that offset, with --from-beginning from each queue's min offset, and commits nothing: reading
again must not move a group that an application may share. queryMsgById reads one message by its offset msgId
(VIEW_MESSAGE_BY_ID to the store host inside the id, as mqadmin does), or by its UNIQ_KEY with -t (ctl/query.py).
"""

from __future__ import annotations

import random
from typing import Annotated

import typer

from common.broker_id import MASTER_ID
from common.perm import PERM_READ, PERM_WRITE
from ctl.options import DEFAULT_NAMESRV, JsonOpt, NamesrvOpt, TopicOpt
from ctl.message_view import message_lines
from ctl.output import Column, Output, human_time
from ctl.progress import Progress, ProgressOpt

app = typer.Typer()

TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
PULL_BATCH = 32

SEND_COLUMNS = [
    Column("Broker Name", "brokerName"),
    Column("QID", "queueId"),
    Column("Send Result", "sendResult"),
    Column("MsgId", "msgId"),
]
MESSAGE_COLUMNS = [
    Column("Broker Name", "brokerName"),
    Column("QID", "queueId"),
    Column("Offset", "queueOffset"),
    Column("MsgId", "msgId"),
    Column("Tags", "tags"),
    Column("Keys", "keys"),
    Column("StoreTime", "storeTime"),
    Column("Body", "body"),
]


def _queue_data(route: dict, broker_name: str) -> dict | None:
    for q in route["queueDatas"]:
        if q["brokerName"] == broker_name:
            return q
    return None


def _master_addr(route: dict, broker_name: str) -> str | None:
    for data in route["brokerDatas"]:
        if data["brokerName"] == broker_name:
            return data["brokerAddrs"].get(MASTER_ID) or None
    return None


def _pick_broker(cluster, route, broker_name: str | None, perm: int) -> list[str]:
    """Broker names of the route allowing ``perm``; UnknownName when -b names no broker of the route."""
    from ctl.errors import CtlError, UnknownName

    names = sorted(q["brokerName"] for q in route["queueDatas"])
    if broker_name is not None:
        if broker_name not in names:
            known = names or cluster.broker_names()
            raise UnknownName("broker", broker_name, known, hint="pass -b with a broker name of the topic's route")
        names = [broker_name]
    usable = [n for n in names if int(_queue_data(route, n).get("perm", 0)) & perm]
    if not usable:
        what = "writable" if perm == PERM_WRITE else "readable"
        raise CtlError(
            f"no {what} queue in the route of this topic ({', '.join(names)})",
            hint="check the topic's perm with `mqctl topicRoute -t <topic> -l`",
        )
    return usable


@app.command("sendMessage")
def send_message(
    topic: TopicOpt,
    body: Annotated[str, typer.Option("-p", "--body", help="Message body (UTF-8).")],
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    keys: Annotated[str | None, typer.Option("-k", "--keys", help="Message keys, space separated.")] = None,
    tags: Annotated[str | None, typer.Option("-c", "--tags", help="Message tag.")] = None,
    broker_name: Annotated[str | None, typer.Option("-b", "--broker", help="Broker name to send to.")] = None,
    queue_id: Annotated[int | None, typer.Option("-i", "--qid", min=0, help="Queue id (with -b).")] = None,
    count: Annotated[
        int, typer.Option("--count", min=1, help="Send this many messages, spread over the writable queues.")
    ] = 1,
    progress: ProgressOpt = None,
    json: JsonOpt = False,
):
    """Send a message (or --count of them) to a topic and print where each went."""
    from ctl.errors import CtlError
    from ctl.rpc import Cluster

    if queue_id is not None and broker_name is None:
        raise typer.BadParameter("-i needs -b <brokerName>", param_hint="-i")
    rows: list[dict] = []
    meter = Progress(progress)
    try:
        with Cluster(namesrv) as cluster:
            route, by_default = cluster.send_route(topic)
            if by_default:
                Output(json).warning(f"topic {topic} has no route yet: sending by the default topic's (TBW102) route, "
                                     "so the broker creates it (autoCreateTopicEnable=true)")
            candidates = _pick_broker(cluster, route, broker_name, PERM_WRITE)
            with_master = [n for n in candidates if _master_addr(route, n)]
            if not with_master:
                raise CtlError(
                    f"no master of {', '.join(candidates)} is registered; only a master takes messages",
                    hint="start the master, or send to another broker (-b)",
                )
            targets = _send_targets(route, with_master, topic, queue_id)
            first = random.randrange(len(targets))
            for i in range(count):
                name, qid = targets[(first + i) % len(targets)]
                rows.append(_send_one(cluster, route, topic, name, qid, body, tags, keys))
                meter.update(f"sent {len(rows)}/{count} messages to {topic}")
    finally:
        if count > 1:
            meter.done(f"sent {len(rows)}/{count} messages to {topic}")
        if rows:  # what was sent before a failure is still shown
            Output(json).table(SEND_COLUMNS, rows)


def _send_targets(route: dict, names: list[str], topic: str, queue_id: int | None) -> list[tuple[str, int]]:
    """(broker name, queue id) pairs to send to in turn: the -i queue of the -b broker, else every write queue."""
    targets = []
    for name in names:
        write_queues = int(_queue_data(route, name).get("writeQueueNums", 0))
        if queue_id is not None and queue_id >= write_queues:
            raise typer.BadParameter(
                f"{name} has {write_queues} write queues for {topic} (0..{write_queues - 1})", param_hint="-i"
            )
        targets += [(name, queue_id)] if queue_id is not None else [(name, q) for q in range(write_queues)]
    return targets


def _send_one(cluster, route: dict, topic: str, name: str, qid: int, body: str, tags, keys) -> dict:
    from client.message import Message, MessageQueue

    message = Message(topic, body.encode(), tags=tags or "", keys=keys or "")
    result = cluster.run(
        cluster.client.send_message(
            _master_addr(route, name), MessageQueue(topic, name, qid), message, producer_group=TOOLS_PRODUCER_GROUP
        )
    )
    return {
        "brokerName": result.message_queue.broker_name,
        "queueId": result.message_queue.queue_id,
        "sendResult": result.status.value,
        "msgId": result.msg_id,
        "offsetMsgId": result.offset_msg_id,
        "queueOffset": result.queue_offset,
    }


def _message_row(msg) -> dict:
    props = msg.properties
    return {
        "brokerName": "",
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "msgId": props.get("UNIQ_KEY", ""),
        "tags": props.get("TAGS"),
        "keys": props.get("KEYS"),
        "storeTime": human_time(msg.store_timestamp),
        "body": msg.body.decode("utf-8", "replace"),
    }


@app.command("consumeMessage")
def consume_message(
    topic: TopicOpt,
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    group: Annotated[
        str,
        typer.Option(
            "-g",
            "--consumerGroup",
            "--group",
            help="Consumer group: where the read starts (its committed offsets) and what it commits.",
        ),
    ] = TOOLS_CONSUMER_GROUP,
    broker_name: Annotated[str | None, typer.Option("-b", "--brokerName", help="Only this broker group.")] = None,
    queue_id: Annotated[int | None, typer.Option("-i", "--queueId", min=0, help="Only this queue (with -b).")] = None,
    offset: Annotated[
        int | None, typer.Option("-o", "--offset", min=0, help="Start at this offset (with -b -i); commit nothing.")
    ] = None,
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning",
            help="Read every stored message again, from each queue's min offset; the group's offsets stay as they "
            "were.",
        ),
    ] = False,
    count: Annotated[int, typer.Option("-c", "--count", min=1, help="Stop after this many messages.")] = 128,
    from_slave: Annotated[bool, typer.Option("--from-slave", help="Pull from the slave.")] = False,
    idle_s: Annotated[float, typer.Option("--timeout", min=0.0, help="Stop after this idle time (s).")] = 3.0,
    json: JsonOpt = False,
):
    """Consume messages from a topic, print them, and commit the group's offsets.

    A second run with the same group prints only what arrived since: the group committed its offsets. Read again
    with --from-beginning, or with a new group (--group).
    """
    from ctl.rpc import Cluster

    if queue_id is not None and broker_name is None:
        raise typer.BadParameter("-i needs -b <brokerName>", param_hint="-i")
    if offset is not None and queue_id is None:
        raise typer.BadParameter("-o needs -b <brokerName> and -i <queueId>", param_hint="-o")
    if offset is not None and from_beginning:
        raise typer.BadParameter("pass either -o <offset> or --from-beginning", param_hint="--from-beginning")
    start = 0 if from_beginning else offset  # below the min offset, the broker points the read at it
    with Cluster(namesrv) as cluster:
        route = cluster.route(topic)
        names = _pick_broker(cluster, route, broker_name, PERM_READ)
        rows = cluster.run(_consume(cluster, topic, group, names, queue_id, start, count, from_slave, idle_s))
    Output(json).table(MESSAGE_COLUMNS, rows, footer=consume_footer(topic, group, len(rows), from_beginning, offset))


def consume_footer(topic: str, group: str, consumed: int, from_beginning: bool, offset: int | None) -> list[str]:
    """Which group was used, whether it moved, and how to read again (a second run with the same group prints
    nothing old, which surprised people)."""
    head = f"consumed {consumed} message(s) from {topic}"
    if from_beginning:
        return [f"{head} from the beginning; group {group}'s offsets are unchanged"]
    if offset is not None:
        return [f"{head} from offset {offset}; group {group}'s offsets are unchanged"]
    return [
        f"{head} as group {group}, which committed its offsets: its next run starts after them",
        f"to read again: --from-beginning (group {group}'s offsets stay), or another group: --group <name>",
    ]


async def _consume(cluster, topic, group, names, queue_id, offset, count, from_slave, idle_s) -> list[dict]:
    """Round-robin over the chosen queues until ``count`` messages or ``idle_s`` without one."""
    import asyncio

    from client.pull_api import PullStatus
    from client.pull_consumer import PullConsumer
    from ctl.rpc import env_credentials
    from ctl.rpc import tls as rpc_tls

    slave_id = 1
    rows: list[dict] = []
    async with PullConsumer(group, ";".join(cluster.namesrv_addrs), request_timeout_s=cluster.timeout_s,
                            credentials=env_credentials(), tls=rpc_tls() or False) as consumer:
        queues = [
            mq
            for mq in await consumer.fetch_subscribe_queues(topic)
            if mq.broker_name in names and (queue_id is None or mq.queue_id == queue_id)
        ]
        cursors = {}
        for mq in queues:
            if from_slave:
                consumer.pull_api.pull_from_which_node[mq] = slave_id
            start = offset if offset is not None else await consumer.query_offset(mq)
            cursors[mq] = [max(start, 0), max(start, 0)]  # next offset, committed
        idle_deadline = asyncio.get_running_loop().time() + idle_s
        while len(rows) < count and cursors and asyncio.get_running_loop().time() < idle_deadline:
            got_any = False
            for mq, cursor in cursors.items():
                want = min(PULL_BATCH, count - len(rows))
                if want <= 0:
                    break
                result = await consumer.pull(mq, cursor[0], want)
                if result.status is PullStatus.FOUND and result.messages:
                    for msg in result.messages[:want]:
                        rows.append({**_message_row(msg), "brokerName": mq.broker_name, "readFrom": result.broker_addr})
                        cursor[0] = msg.queue_offset + 1
                    got_any = True
                elif result.status is PullStatus.OFFSET_ILLEGAL or result.status is PullStatus.NO_MATCHED_MSG:
                    cursor[0] = result.next_begin_offset
            if got_any:
                idle_deadline = asyncio.get_running_loop().time() + idle_s
            else:
                await asyncio.sleep(min(0.2, max(0.0, idle_deadline - asyncio.get_running_loop().time())))
        if offset is None:  # -o and --from-beginning read without moving the group
            for mq, (next_offset, committed) in cursors.items():
                if next_offset != committed:
                    await consumer.commit_offset(mq, next_offset)
    return rows


@app.command("queryMsgById")
def query_msg_by_id(
    msg_id: Annotated[str, typer.Option("-i", "--msgId", help="offsetMsgId, or with -t the msgId (UNIQ_KEY).")],
    topic: Annotated[str, typer.Option("-t", "--topic", help="The topic, to look a UNIQ_KEY up in the index.")] = "",
    namesrv: NamesrvOpt = DEFAULT_NAMESRV,
    json: JsonOpt = False,
):
    """Query a message by its offset msgId (the store host inside the id is asked for the record) or, with -t, by
    the msgId a producer reported (its UNIQ_KEY, found through the brokers' message index)."""
    from ctl.rpc import Cluster
    from remoting.message_codec import MessageCodecError, decode, parse_offset_msg_id

    try:
        (host, port), offset = parse_offset_msg_id(msg_id.strip())
    except MessageCodecError as exc:
        if topic:  # not an offset msgId: RocketMQ's viewMessage(topic, msgId) then asks the index
            from ctl.query import show_by_unique_key

            show_by_unique_key(namesrv, topic, msg_id.strip(), json)
            return
        raise typer.BadParameter(
            f"{exc.message}; pass the offsetMsgId of a SendResult (mqctl sendMessage --json prints it), or the msgId "
            "(UNIQ_KEY) with -t TOPIC",
            param_hint="-i",
        ) from None
    with Cluster(namesrv) as cluster:
        if topic and f"{host}:{port}" not in {ref.addr for ref in cluster.brokers()}:
            # both ids are 32 hex digits; one whose "store host" is no broker of this cluster is a UNIQ_KEY
            from ctl.query import show_by_unique_key

            show_by_unique_key(namesrv, topic, msg_id.strip(), json)
            return
        record = cluster.run(cluster.client.view_message(f"{host}:{port}", offset))
    data, lines = message_lines(decode(record), msg_id.strip().upper())
    Output(json).show(data, lines)
