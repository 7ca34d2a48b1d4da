"""END_TRANSACTION (37): pyrmq has no transactional messages, so it says so instead of answering "unknown code".

A transactional producer's half message is already refused at send time (``send_admit``: 16 NO_PERMISSION, as
RocketMQ answers with ``rejectTransactionMessage``), so an END_TRANSACTION has nothing to commit or roll back.
It usually comes oneway; when it asks for an answer it gets 3 REQUEST_CODE_NOT_SUPPORTED with the reason.
"""

from __future__ import annotations

from broker.context import BrokerContext
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to


def _end_transaction(ctx: BrokerContext, conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return response_to(
        request,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        f"broker {ctx.broker_name}: pyrmq has no transactional messages, so there is no half message to commit or"
        " roll back; send plain messages",
    )


def register(server, ctx: BrokerContext) -> None:
    server.register(RequestCode.END_TRANSACTION, lambda conn, request: _end_transaction(ctx, conn, request))
