"""The broker's Messaging servicer: one line per RPC, routing to ``handlers/`` (RocketMQ proxy's
GrpcMessagingApplication -> activities)."""

from __future__ import annotations

from broker.grpc import exchange
from broker.context import BrokerContext
from broker.grpc.guard import guarded
from broker.grpc.handlers import heartbeat, offsets, pull, send, send_back
from remoting.pb import broker_pb2, broker_pb2_grpc, common_pb2


class MessagingServicer(broker_pb2_grpc.MessagingServicer):
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    SendMessage = guarded(broker_pb2.SendMessageResponse, send.handle)
    PullMessage = guarded(broker_pb2.PullMessageResponse, pull.handle)
    QueryConsumerOffset = guarded(broker_pb2.QueryConsumerOffsetResponse, offsets.query)
    UpdateConsumerOffset = guarded(common_pb2.Ack, offsets.update)
    GetQueueOffsets = guarded(broker_pb2.GetQueueOffsetsResponse, offsets.queue_offsets)
    SearchOffsetByTime = guarded(broker_pb2.SearchOffsetByTimeResponse, offsets.search_by_time)
    Heartbeat = guarded(common_pb2.Ack, heartbeat.heartbeat)
    UnregisterClient = guarded(common_pb2.Ack, heartbeat.unregister)
    GetConsumerIdList = guarded(broker_pb2.GetConsumerIdListResponse, heartbeat.consumer_ids)
    ConsumerSendMsgBack = guarded(common_pb2.Ack, send_back.handle)
    ViewMessage = guarded(broker_pb2.ViewMessageResponse, offsets.view)

    async def Exchange(self, request_iterator, context):
        await exchange.serve(self.ctx, request_iterator, context.write)
