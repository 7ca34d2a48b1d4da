"""QueryRoute and QueryAssignment (RocketMQ's proxy ``RouteActivity``), cluster-wide.

Every broker group of the topic is listed (``cluster.ClusterRoutes``: the nameserver's route, this broker's own
topic table, each master's ``grpcServerPort``), so any broker, master or slave, is a valid access point: each queue
names the master that owns it (broker id 0, the id the clients keep) with that master's v2 endpoint, its
permission from the topic's perm and the queue id (below readQueueNums: readable; below writeQueueNums: writable).
A group whose master is down or serves no v2 endpoint is left out (logged); when none is left the answer says why.

QueryAssignment answers one assignment per master with readable queues, queue id -1, as RocketMQ does for
non-FIFO pop: every client of a group gets the same list and pop spreads the work.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.grpc_v2 import codes
from broker.grpc_v2.cluster import ClusterRoutes, Owner, RouteUnknown
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.metadata.topics import is_system_topic
from broker.processors import validate
from common.perm import perm_readable, perm_writeable

ACCEPTED_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)


def permission(perm: int, read_queue_nums: int, write_queue_nums: int, queue_id: int) -> int:
    read = perm_readable(perm) and queue_id < read_queue_nums
    write = perm_writeable(perm) and queue_id < write_queue_nums
    if read and write:
        return pb.Permission.READ_WRITE
    return pb.Permission.READ if read else pb.Permission.WRITE if write else pb.Permission.NONE


def _broker(owner: Owner) -> pb.Broker:
    return pb.Broker(name=owner.share.broker_name, id=0, endpoints=owner.endpoints())


async def owners(ctx: BrokerContext, routes: ClusterRoutes, topic: str) -> list[Owner] | pb.Status:
    """The topic's broker groups that serve v2, or the status that says why there are none."""
    bad = validate.topic_name(topic)
    if bad or is_system_topic(topic):
        return codes.status(pb.Code.ILLEGAL_TOPIC, bad.remark if bad else f"{topic} is a system topic; use your own")
    try:
        found, left_out = await routes.owners(topic)
    except RouteUnknown as exc:
        return codes.status(pb.Code.INTERNAL_SERVER_ERROR, f"{exc}; check namesrvAddr of broker {ctx.broker_name}")
    if found:
        return found
    if left_out:
        return codes.status(pb.Code.INTERNAL_SERVER_ERROR, f"no broker group of {topic} serves RocketMQ 5 clients"
                            f" now: {'; '.join(left_out)}")
    return codes.status(pb.Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist in the cluster of broker"
                        f" {ctx.broker_name}; create it (mqctl updateTopic -t {topic})")


async def query_route(ctx: BrokerContext, routes: ClusterRoutes, req: spb.QueryRouteRequest) -> spb.QueryRouteResponse:
    found = await owners(ctx, routes, req.topic.name)
    if isinstance(found, pb.Status):
        return spb.QueryRouteResponse(status=found)
    queues = []
    for owner in found:
        s, broker = owner.share, _broker(owner)
        queues += [
            pb.MessageQueue(topic=req.topic, id=qid, broker=broker, accept_message_types=ACCEPTED_TYPES,
                            permission=permission(s.perm, s.read_queue_nums, s.write_queue_nums, qid))
            for qid in range(max(s.read_queue_nums, s.write_queue_nums))
        ]
    return spb.QueryRouteResponse(status=codes.OK, message_queues=queues)


async def query_assignment(
    ctx: BrokerContext, routes: ClusterRoutes, req: spb.QueryAssignmentRequest
) -> spb.QueryAssignmentResponse:
    found = await owners(ctx, routes, req.topic.name)
    if isinstance(found, pb.Status):
        return spb.QueryAssignmentResponse(status=found)
    readable = [o for o in found if perm_readable(o.share.perm) and o.share.read_queue_nums > 0]
    if not readable:
        return spb.QueryAssignmentResponse(
            status=codes.status(pb.Code.FORBIDDEN, f"no readable queue of {req.topic.name} in the cluster")
        )
    assignments = [
        pb.Assignment(message_queue=pb.MessageQueue(
            topic=req.topic, id=-1, permission=pb.Permission.READ_WRITE, broker=_broker(o),
            accept_message_types=ACCEPTED_TYPES))
        for o in readable
    ]
    return spb.QueryAssignmentResponse(status=codes.OK, assignments=assignments)
