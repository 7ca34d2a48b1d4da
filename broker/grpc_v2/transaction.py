"""Transactional messages on the v2 endpoint (RocketMQ's proxy: SendMessage with MessageType.TRANSACTION,
EndTransaction, and the broker's check as RecoverOrphanedTransactionCommand on the Telemetry stream).

A v2 producer has no group: the proxy registers it under each topic it publishes (``presence``), so a v2 half's
``PGROUP`` is its topic and the check service finds the topic's live v2 producers like remoting ones. The
``transaction_id`` the send answers names the half copy, ``<offsetMsgId>:<queue offset>`` (opaque to the client,
which only echoes it), so EndTransaction goes through the remoting END_TRANSACTION's checks
(``processors.transaction.end_transaction``) with the same outcomes.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.grpc_v2.convert import Unconvertible, to_proto
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.processors.transaction import end_transaction
from broker.transaction import records as tx
from remoting.codes import ResponseCode
from remoting.frame_codec import RemotingCommand
from remoting.message_codec import MessageCodecError, decode, parse_offset_msg_id

RESOLUTION_KIND = {pb.TransactionResolution.COMMIT: tx.TRANSACTION_COMMIT_TYPE,
                   pb.TransactionResolution.ROLLBACK: tx.TRANSACTION_ROLLBACK_TYPE}


def transaction_id(offset_msg_id: str, queue_offset: int) -> str:
    return f"{offset_msg_id}:{queue_offset}"


def parse_transaction_id(text: str) -> tuple[int, int] | None:
    """(commitlog offset, queue offset) of a transaction id this endpoint gave, else None."""
    msg_id, _, queue_text = text.partition(":")
    if not (queue_text.isascii() and queue_text.isdigit() and len(queue_text) < 19):
        return None
    try:
        _, phy = parse_offset_msg_id(msg_id)
    except MessageCodecError:
        return None
    return phy, int(queue_text)


async def end(ctx: BrokerContext, req: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
    parsed = parse_transaction_id(req.transaction_id)
    if parsed is None:
        return spb.EndTransactionResponse(status=codes.status(
            pb.Code.INVALID_TRANSACTION_ID, f"transaction_id {req.transaction_id[:80]!r} is not one this broker gave;"
            " send the transaction_id of the SendMessage result (or of the server's check)"))
    kind = RESOLUTION_KIND.get(req.resolution)
    if kind is None:
        return spb.EndTransactionResponse(status=codes.status(
            pb.Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK"))
    phy, queue_offset = parsed
    code, remark = await end_transaction(ctx, req.topic.name, queue_offset, phy, kind,
                                         req.source == pb.TransactionSource.SOURCE_SERVER_CHECK)
    if code == ResponseCode.SUCCESS:
        return spb.EndTransactionResponse(status=codes.OK)
    return spb.EndTransactionResponse(status=codes.from_remoting(code, remark))


def recover_command(ctx: BrokerContext, check: RemotingCommand) -> spb.TelemetryCommand | None:
    """The Telemetry form of a CHECK_TRANSACTION_STATE the check service sent to a v2 producer's channel; None when
    its half cannot be given to a client (the next round asks again)."""
    ext = check.ext or {}
    try:
        half = decode(check.body_bytes())
        message = to_proto(half, topic=half.topic, receipt_handle="", invisible_ms=0,
                           store_host=f"{ctx.store_host[0]}:{ctx.store_host[1]}")
    except (Unconvertible, MessageCodecError, ValueError):
        return None
    message.system_properties.message_type = pb.MessageType.TRANSACTION
    tx_id = transaction_id(ext.get("offsetMsgId", ""), int(ext.get("tranStateTableOffset", "0") or 0))
    return spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
        message=message, transaction_id=tx_id))
