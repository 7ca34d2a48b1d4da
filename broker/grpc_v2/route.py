"""QueryRoute and QueryAssignment (RocketMQ's proxy ``RouteActivity`` in local mode).

Each queue's endpoint is this broker's ``brokerIP1:grpcServerPort`` (the bound port), its permission from the
topic's perm and the queue id (below readQueueNums: readable; below writeQueueNums: writable), broker id 0 (a
master; the clients keep only id 0). Slaves serve no queues to v2 clients: a slave answers FORBIDDEN naming its
master group, so a client is never routed to a broker that refuses writes and pops.

Only this broker's queues are listed: a topic that lives on other broker groups is reached through their own
endpoints (give the client one of them as its access point). QueryAssignment answers one assignment per broker,
queue id -1, as RocketMQ does for non-FIFO pop: every client of a group gets the same list and pop spreads the
work.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.metadata.topics import TopicConfig, is_system_topic, perm_readable, perm_writeable
from broker.processors import validate

ACCEPTED_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)


def endpoints(ctx: BrokerContext, grpc_port: int) -> pb.Endpoints:
    return pb.Endpoints(
        scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host=ctx.settings.broker.broker_ip1, port=grpc_port)]
    )


def _permission(cfg: TopicConfig, queue_id: int) -> int:
    read = perm_readable(cfg.perm) and queue_id < cfg.read_queue_nums
    write = perm_writeable(cfg.perm) and queue_id < cfg.write_queue_nums
    if read and write:
        return pb.Permission.READ_WRITE
    return pb.Permission.READ if read else pb.Permission.WRITE if write else pb.Permission.NONE


def topic_config(ctx: BrokerContext, name: str) -> TopicConfig | pb.Status:
    bad = validate.topic_name(name)
    if bad or is_system_topic(name):
        return codes.status(pb.Code.ILLEGAL_TOPIC, bad.remark if bad else f"{name} is a system topic; use your own")
    if ctx.is_slave:
        return codes.status(
            pb.Code.FORBIDDEN,
            ctx.slave_refusal(f"RocketMQ 5 clients use the master of {ctx.broker_name}: give its endpoint"),
        )
    cfg = ctx.topics.get(name)
    if cfg is None:
        return codes.status(
            pb.Code.TOPIC_NOT_FOUND,
            f"topic {name} does not exist on broker {ctx.broker_name}; create it (mqctl updateTopic -t {name}) or"
            " use the endpoint of the broker that holds it",
        )
    return cfg


def query_route(ctx: BrokerContext, grpc_port: int, req: spb.QueryRouteRequest) -> spb.QueryRouteResponse:
    cfg = topic_config(ctx, req.topic.name)
    if isinstance(cfg, pb.Status):
        return spb.QueryRouteResponse(status=cfg)
    broker = pb.Broker(name=ctx.broker_name, id=0, endpoints=endpoints(ctx, grpc_port))
    queues = [
        pb.MessageQueue(topic=req.topic, id=qid, permission=_permission(cfg, qid), broker=broker,
                        accept_message_types=ACCEPTED_TYPES)
        for qid in range(max(cfg.read_queue_nums, cfg.write_queue_nums))
    ]
    return spb.QueryRouteResponse(status=codes.OK, message_queues=queues)


def query_assignment(
    ctx: BrokerContext, grpc_port: int, req: spb.QueryAssignmentRequest
) -> spb.QueryAssignmentResponse:
    cfg = topic_config(ctx, req.topic.name)
    if isinstance(cfg, pb.Status):
        return spb.QueryAssignmentResponse(status=cfg)
    if not perm_readable(cfg.perm) or cfg.read_queue_nums <= 0:
        return spb.QueryAssignmentResponse(
            status=codes.status(pb.Code.FORBIDDEN, f"no readable queue of {req.topic.name} on {ctx.broker_name}")
        )
    broker = pb.Broker(name=ctx.broker_name, id=0, endpoints=endpoints(ctx, grpc_port))
    queue = pb.MessageQueue(topic=req.topic, id=-1, permission=pb.Permission.READ_WRITE, broker=broker,
                            accept_message_types=ACCEPTED_TYPES)
    return spb.QueryAssignmentResponse(status=codes.OK, assignments=[pb.Assignment(message_queue=queue)])
