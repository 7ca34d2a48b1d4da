"""SendMessage (RocketMQ's proxy ``SendMessageActivity``): one or many messages, each admitted by the same
function as a remoting send (``broker.processors.send_admit.admit``: role, permission, topic, queue), converted by
``convert.to_draft`` and appended with ``MessageStore.put_messages``; in the endpoint (``grouped``) plain and FIFO
messages go through ``MessageStore.put_grouped`` instead, as the remoting path's single sends do: the messages of
the calls one event-loop pass runs share one append per queue and one replica wait, each answered with its own queue
offset. Transaction halves and delay messages keep their own put.

Queue choice: a message with a message_group (FIFO) goes to ``crc32(group) % writeQueueNums`` so a group stays in
one queue; any other to a queue ``admit`` picks. The answer has one entry per message (the official client sends
one and asserts exactly one entry), each with the client's message_id and the queue offset; the top-level status
is the first non-OK entry's (errors belong there: the client ignores entry statuses). A weak "stored" status of a
SYNC_MASTER is never OK (``codes.put_status``). A TRANSACTION message is a half (``grpc_v2.transaction``). What is stored
passes the remoting senders' property rules (``validate.properties_dict``): a system property name among the user
properties is refused by ``convert.to_draft`` (ILLEGAL_MESSAGE_PROPERTY_KEY), as RocketMQ's proxy refuses it.
"""

from __future__ import annotations

import time
import zlib

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.grpc_v2.convert import BadMessage, to_draft
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.transaction import transaction_id
from broker.processors import validate
from broker.processors.send_admit import Refusal, admit
from broker.store.types import PutResult, PutStatus
from remoting.message_headers import DEFAULT_TOPIC, SendHeader

MAX_MESSAGES_PER_REQUEST = 1024
# read on every send: a protobuf enum's attribute is a Python-level __getattr__, a module constant is not
CODE_OK = pb.Code.OK
TRANSACTION = pb.MessageType.TRANSACTION


def _header(topic: str, queue_id: int, born_ms: int) -> SendHeader:
    return SendHeader(
        producer_group="", topic=topic, default_topic=DEFAULT_TOPIC, default_topic_queue_nums=4, queue_id=queue_id,
        sys_flag=0, born_timestamp=born_ms, flag=0, properties="", reconsume_times=0, max_reconsume_times=None,
        batch=False, broker_name=None, dedup=False,
    )


async def _send_one(ctx: BrokerContext, msg: pb.Message, born_host: tuple[str, int],
                    grouped: bool) -> spb.SendResultEntry:
    sp = msg.system_properties
    entry = spb.SendResultEntry(message_id=sp.message_id)
    half = sp.message_type == TRANSACTION
    if half and (ctx.transactions is None or ctx.settings.broker.reject_transaction_message):
        entry.status.CopyFrom(codes.status(pb.Code.FORBIDDEN, f"broker {ctx.broker_name} refuses transactional"
                                           " messages (rejectTransactionMessage=true or not a master)"))
        return entry
    topic = msg.topic.name
    now_ms = int(time.time() * 1000)
    queue_id = -1
    if sp.HasField("message_group") and sp.message_group:
        cfg = ctx.topics.get(topic)
        if cfg is not None and cfg.write_queue_nums > 0:
            queue_id = zlib.crc32(sp.message_group.encode()) % cfg.write_queue_nums
    target = admit(ctx, _header(topic, queue_id, now_ms))
    if isinstance(target, Refusal):
        entry.status.CopyFrom(codes.from_remoting(target.code, target.remark))
        return entry
    if ctx.topics.unsaved(target.topic):
        await ctx.topics.saved()  # a topic this send created is on disk before the message is acknowledged
    try:
        # the levels are parsed from messageDelayLevel on every read (it can change at runtime): only a delay
        # message needs them, and the parse was a sixth of a plain send's handler time
        delayed = sp.HasField("delivery_timestamp")
        levels = ctx.settings.store.delay_levels_ms if delayed else ()
        draft = to_draft(msg, born_host=born_host, levels_ms=levels, max_body=ctx.max_message_size, now_ms=now_ms,
                         cluster=ctx.settings.broker.broker_cluster_name)
    except BadMessage as exc:
        entry.status.CopyFrom(codes.status(exc.code, str(exc)))
        return entry
    bad = validate.properties_dict(draft.properties)  # the remoting senders' rules, on what will be stored
    if bad:
        entry.status.CopyFrom(codes.status(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, bad.remark))
        return entry
    if half:  # PGROUP is the topic: v2 producers are registered under the topics they publish (presence)
        result = await ctx.transactions.put_half(draft, target.topic, target.queue_id, target.topic, True, None)
        if result.status.stored:
            entry.transaction_id = transaction_id(ctx.offset_msg_ids(result.physical_offsets)[0],
                                                  result.queue_offset)
    elif grouped and not delayed:
        # every v2 message waits for its flush and replica (WAIT is reserved: convert.RESERVED), bounded by the
        # store's own timeouts, not the call's deadline, as before; a call cancelled meanwhile leaves its message stored
        put = ctx.store.put_grouped(target.topic, target.queue_id, draft, wait=True)
        result = put if isinstance(put, PutResult) else await put
    else:
        result = await ctx.store.put_messages(target.topic, target.queue_id, [draft])
    # PUT_OK (nearly every send) copies the prebuilt OK status; put_status builds one, with its advice, per call
    ok = result.status is PutStatus.PUT_OK
    entry.status.CopyFrom(codes.OK if ok else codes.put_status(result.status, result.remark))
    if result.status.stored:
        entry.offset = result.queue_offset  # this message's own (put_grouped answers each member its own)
        ctx.stats.put.add(1)
    if ctx.metrics is not None:
        ctx.metrics.on_send(target.topic, 1, len(draft.body), result.status, sizes=[len(draft.body)])
    return entry


async def send_message(
    ctx: BrokerContext, req: spb.SendMessageRequest, born_host: tuple[str, int],
    grouped: bool = False,
) -> spb.SendMessageResponse:
    """``grouped``: plain and FIFO messages are stored with the other single puts of this loop pass
    (``MessageStore.put_grouped``), as the endpoint does."""
    if not req.messages:
        return spb.SendMessageResponse(status=codes.status(pb.Code.BAD_REQUEST, "no message in the request"))
    if len(req.messages) > MAX_MESSAGES_PER_REQUEST:
        return spb.SendMessageResponse(status=codes.status(
            pb.Code.BAD_REQUEST, f"{len(req.messages)} messages in one request; send at most {MAX_MESSAGES_PER_REQUEST}"))
    entries = [await _send_one(ctx, m, born_host, grouped) for m in req.messages]
    first_bad = next((e.status for e in entries if e.status.code != CODE_OK), None)
    return spb.SendMessageResponse(status=first_bad or codes.OK, entries=entries)
