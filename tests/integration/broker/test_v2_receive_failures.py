"""A RocketMQ 5 receive that fails on the broker is logged with a rate limit (issue 22 item 9): a consumer polling
a queue that makes every receive fail wrote one traceback per call into the broker's log.

The failing receive is the issue's own: a message whose ``TIMER_DELIVER_MS`` is a Unicode digit (``²``) that the
v2 conversion cannot read. Once the broker refuses such a message on the way in or skips it on the way out (items
5 and 8), no receive fails and the log has no traceback at all, which this test accepts too.
"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from tests.integration.broker.rpc import group_config, message

pytestmark = pytest.mark.integration

CLIENT_ID = [("x-mq-client-id", "pytest@receive-failures")]
TOPIC, GROUP = "V2PoisonT", "v2-poison-g"
RECEIVES = 20


async def receive(stub) -> list:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=1,
        invisible_duration=Duration(seconds=10), long_polling_timeout=Duration(seconds=0))
    return [r async for r in stub.ReceiveMessage(req, metadata=CLIENT_ID, timeout=10)]


async def test_failing_receives_leave_at_most_one_traceback_in_the_log(master, client):
    assert (await client.create_topic(TOPIC, queues=1)).code == 0
    assert (await client.create_group(group_config(GROUP))).code == 0
    for _ in range(RECEIVES):  # each receive takes one (a failed one stays in flight for its invisible time)
        await client.send(TOPIC, 0, [message(b"poison", TIMER_DELIVER_MS="\u00b2")])
    before = master.new_output().count("Traceback")
    codes = []
    async with grpc.aio.insecure_channel(master.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        for _ in range(RECEIVES):
            codes += [r.status.code for r in await receive(stub) if r.HasField("status")]
    failed = codes.count(pb.Code.INTERNAL_SERVER_ERROR)
    tracebacks = master.new_output().count("Traceback") - before
    assert tracebacks <= 1, f"{tracebacks} tracebacks for {failed} failed receives"
