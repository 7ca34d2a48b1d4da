"""END_TRANSACTION (37): a producer's commit (8) or rollback (12) of a half message (RocketMQ
EndTransactionProcessor; spec controller-and-features.md §2.1).

The request names the half by ``commitLogOffset``; that offset comes from the client, so the record there is read
with ``record_reader.record_at`` (a whole, intact record must start exactly there) unless the transaction service
holds an open half copy at exactly that offset and ``tranStateTableOffset`` (it stored it there) and must be a half message of
the header's ``producerGroup`` at queue offset ``tranStateTableOffset`` (RocketMQ's checkPrepareMessage). The
transaction service then resolves it (``broker.transaction.service``). Usually oneway; a request that asks for an
answer gets a specific code and a remark:

- 0 done; 14 SERVICE_NOT_AVAILABLE on a slave; 16 NO_PERMISSION with ``rejectTransactionMessage=true`` or from
  another producer group; 29 INVALID_PARAMETER for a bad header or a record that is not a half message (22
  QUERY_NOT_FOUND when it expired); 1 SYSTEM_ERROR when the transaction was already committed or rolled back
  (RocketMQ's code for every END refusal); 22 QUERY_NOT_FOUND when no copy of it is open here; 2 SYSTEM_BUSY while
  another END of the same transaction runs. ``commitOrRollback`` 0 (unknown) changes nothing: the check asks later.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.record_reader import RecordRefusal, max_record_size, record_at
from broker.transaction import records as tx
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import Fields
from remoting.message_codec import decode


async def end_transaction(ctx: BrokerContext, group: str, table_offset: int, phy: int, kind: int,
                          from_check: bool) -> tuple[int, str]:
    """(response code, remark) of resolving the half at commitlog ``phy`` (shared with the v2 EndTransaction)."""
    if ctx.is_slave:
        return ResponseCode.SERVICE_NOT_AVAILABLE, ctx.slave_refusal("send END_TRANSACTION to the master")
    service = ctx.transactions
    if service is None:
        return ResponseCode.NO_PERMISSION, (f"broker {ctx.broker_name} refuses transactional messages"
                                            " (rejectTransactionMessage=true); there is no half message to commit or"
                                            " roll back")
    if kind == tx.TRANSACTION_NOT_TYPE:
        return ResponseCode.SUCCESS, ("commitOrRollback=0 (unknown): nothing done; the broker's check will ask the"
                                      " producer group again")
    if kind not in (tx.TRANSACTION_COMMIT_TYPE, tx.TRANSACTION_ROLLBACK_TYPE):
        return ResponseCode.INVALID_PARAMETER, f"commitOrRollback={kind}: send 8 (commit), 12 (rollback) or 0 (unknown)"
    half = service.open_half(table_offset, phy)
    if half is None:  # not an open copy at that offset: what lies at the client's offset is checked first
        raw = record_at(ctx.store, phy, max_record_size(ctx.max_message_size), f"broker {ctx.broker_name}")
        if isinstance(raw, RecordRefusal):
            return raw.code, f"Find prepared transaction message failed: {raw.remark}"
        half = decode(raw)
    try:
        tx.committed_target(half)
    except ValueError as exc:
        return ResponseCode.INVALID_PARAMETER, (f"the message at commitLogOffset {phy} is {exc}; give the offset of"
                                                " the half message (the offsetMsgId of its send result)")
    owner = half.properties.get(tx.PROPERTY_PRODUCER_GROUP, "")
    if owner != group:
        return ResponseCode.NO_PERMISSION, (f"The producer group wrong: the half message at {phy} belongs to producer"
                                            f" group {owner!r}, not {group!r}")
    if table_offset != half.queue_offset:
        return ResponseCode.INVALID_PARAMETER, (f"The transaction state table offset wrong: the half message at {phy}"
                                                f" has queue offset {half.queue_offset}, the request says"
                                                f" {table_offset}")
    out = await service.end(half, kind == tx.TRANSACTION_COMMIT_TYPE, from_check)
    return out.code, out.remark


async def _end_transaction(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    f = Fields(request.ext, "END_TRANSACTION")
    code, remark = await end_transaction(
        ctx, f.req_str("producerGroup"), f.req_long("tranStateTableOffset"), f.req_long("commitLogOffset"),
        f.req_int("commitOrRollback"), f.bool("fromTransactionCheck"))
    return response_to(request, code, remark or None)


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.END_TRANSACTION, lambda conn, request: _end_transaction(ctx, conn, request))
