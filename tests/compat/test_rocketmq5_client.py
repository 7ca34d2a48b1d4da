"""The official RocketMQ 5 Python client (``rocketmq-python-client`` 5.1.2, unchanged, in its own process) against
real pyrmq processes: a nameserver, a SYNC_MASTER and its slave, the client talking to the master's
apache.rocketmq.v2 endpoint (``grpcServerPort``); for the cluster-wide route a second broker group (a master of
another cluster on the same nameserver, so the other tests' topics stay on one group). Raw v2 calls (the broker's
own stubs) check the answers the client does not show: routes, unsupported RPCs, a missing client id, an unknown
topic.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from prometheus_client.parser import text_string_to_metric_families

from broker.grpc_v2.clients import MAX_STREAMS_PER_CLIENT
from broker.grpc_v2.pb import definition_pb2 as pb
from broker.grpc_v2.pb import service_pb2 as spb
from broker.grpc_v2.pb import service_pb2_grpc as sgrpc
from broker.grpc_v2.pop.revive_log import revive_topic
from broker.grpc_v2.pop.state import TAG_ACK, TAG_CK, Ack, Checkpoint, PopState
from broker.grpc_v2.service import MAX_STREAMS_PER_CONNECTION, SETTINGS_WAIT_S
from remoting.codes import RequestCode
from tests.compat import harness
from harness.rocketmq5 import ClientError, Rmq5Client
from tests.integration.broker.rpc import BrokerClient, group_config
from tests.integration.ctl.cli import ok_json
from harness.procs import Broker, Namesrv
from harness.waiting import async_wait_until, wait_until

pytestmark = pytest.mark.integration

CLIENT_ID = [("x-mq-client-id", "pytest@raw")]
T = TypeVar("T")


TX_CHECKS = {"transactionTimeOut": 1000, "transactionCheckInterval": 300}  # a crashed producer's half is checked soon
MODULE_CONF = {**TX_CHECKS, "enablePropertyFilter": "true"}  # SQL92 filters (off by default, as RocketMQ)


def _start_group(root, **conf) -> harness.Group:
    """A nameserver, a SYNC_MASTER and its slave sharing an HA secret; the v2 clients use the master's endpoint."""
    namesrv = Namesrv(root / "namesrv").start(harness.BOOT_S)
    started: list = [namesrv]
    try:
        common = {"slaveSynchronizeInterval": 1000, "haAuthSecret": "v2-compat-" + "0" * 54, **conf}
        master = Broker(root / "master", name=harness.BROKER_NAME, namesrv_addr=namesrv.addr, role="SYNC_MASTER",
                        cluster=harness.CLUSTER, **common).start(harness.BOOT_S)
        started.append(master)
        slave = Broker(root / "slave", name=harness.BROKER_NAME, namesrv_addr=namesrv.addr, role="SLAVE",
                       broker_id=1, cluster=harness.CLUSTER, haMasterAddress=master.ha_addr,
                       **common).start(harness.BOOT_S)
        started.append(slave)
        g = harness.Group(namesrv, master, slave)
        wait_until(lambda: harness.slave_in_sync(g), harness.READY_S,
                   lambda: f"haStatus never showed the slave attached and OK\n{g.logs()}")
        return g
    except BaseException:
        for proc in reversed(started):
            proc.stop()
        raise


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    g = _start_group(tmp_path_factory.mktemp("v2-cluster"), **MODULE_CONF)
    yield g
    for proc in g.procs():
        proc.stop()


CLUSTER_B = "V2ClusterB"
BROKER_B = "broker-v2-b"


@pytest.fixture(scope="module")
def group_b(group, tmp_path_factory):
    """A second broker group (a master alone) registered with the same nameserver."""
    master = Broker(tmp_path_factory.mktemp("v2-group-b"), name=BROKER_B, namesrv_addr=group.namesrv_addr,
                    role="ASYNC_MASTER", cluster=CLUSTER_B).start(harness.BOOT_S)
    yield master
    master.stop()


def _create_on_both(group, group_b, topic: str, queues: int) -> None:
    harness.create_topic(group, topic, queues)
    ok_json("updateTopic", "-n", group.namesrv_addr, "-c", CLUSTER_B, "-t", topic, "-r", str(queues),
            "-w", str(queues))

    def routed() -> bool:
        route = ok_json("topicRoute", "-n", group.namesrv_addr, "-t", topic)
        return {q["brokerName"] for q in route["queueDatas"]} == {harness.BROKER_NAME, BROKER_B}

    wait_until(routed, harness.READY_S, f"topicRoute never listed {topic} on both broker groups")


@pytest.fixture
def stub(group):
    channel = grpc.insecure_channel(group.master.grpc_addr)
    yield sgrpc.MessagingServiceStub(channel)
    channel.close()


def _remoting(addr: str, call: Callable[[BrokerClient], Awaitable[T]]) -> T:
    """What ``call`` returns, given a remoting client of the broker at ``addr``, run from a synchronous test."""

    async def run() -> T:
        async with BrokerClient(addr) as remoting:
            return await call(remoting)

    return asyncio.run(run())


def _queue_max_offsets(group, topic: str, broker_name: str = harness.BROKER_NAME) -> int:
    rows = ok_json("topicStatus", "-n", group.namesrv_addr, "-t", topic)
    return sum(int(r["maxOffset"]) for r in rows if r["brokerName"] == broker_name)


def test_producer_send_and_send_async_get_receipts_and_the_messages_are_stored(group, client):
    topic = harness.unique("v2send")
    harness.create_topic(group, topic, 4)
    producer = _producer(client, group, topic)
    sync = producer.call(op="send", topic=topic, body="one", tag="TagA", keys=["k1", "k2"], props={"p": "v"})
    asynchronous = producer.call(op="send", topic=topic, body="two", **{"async": True})
    fifo = producer.call(op="send", topic=topic, body="three", group="order-1")
    ids = [r["message_id"] for r in (sync, asynchronous, fifo)]
    assert all(ids) and len(set(ids)) == 3
    assert _queue_max_offsets(group, topic) == 3


def test_the_official_transactional_producer_commits_rolls_back_and_its_checker_commits_a_crashed_half(group, client):
    topic, cgroup = harness.unique("v2tx"), harness.unique("v2txgroup")
    harness.create_topic(group, topic, 4)
    crashed = client()
    crashed.call(op="tx_producer", endpoint=group.master.grpc_addr, topics=[topic], check="ROLLBACK")
    crashed.call(op="tx_send", topic=topic, body="orphan", end="none")
    crashed.close()  # gone between the half and its commit
    producer = client()
    producer.call(op="tx_producer", endpoint=group.master.grpc_addr, topics=[topic], check="COMMIT")
    producer.call(op="tx_send", topic=topic, body="committed", end="commit")
    producer.call(op="tx_send", topic=topic, body="rolled-back", end="rollback")
    wait_until(lambda: "orphan" in producer.call(op="checked"), 30, "the broker's check to reach the live producer")
    consumer = _consumer(client, group, topic, cgroup, await_s=1)
    got = _receive_until(consumer, 2, invisible_s=30)
    assert sorted(m["body"] for m in got) == ["committed", "orphan"]
    wait_until(lambda: _queue_max_offsets(group, topic) == 2, 10, "the topic to hold the two committed messages")
    assert consumer.call(op="receive", max=32, invisible_s=30)["messages"] == []


def test_unsupported_rpcs_answer_unsupported_naming_the_feature(group, stub):
    end = stub.EndTransaction(spb.EndTransactionRequest(), metadata=CLIENT_ID, timeout=5)
    assert end.status.code == pb.Code.INVALID_TRANSACTION_ID and "transaction_id" in end.status.message
    recall = stub.RecallMessage(spb.RecallMessageRequest(), metadata=CLIENT_ID, timeout=5)
    assert recall.status.code == pb.Code.UNSUPPORTED and "RecallMessage" in recall.status.message


def test_a_call_without_client_id_and_an_unknown_topic_get_v2_codes(group, stub):
    req = spb.QueryRouteRequest(topic=pb.Resource(name="no_such_topic_v2"))
    assert stub.QueryRoute(req, timeout=5).status.code == pb.Code.CLIENT_ID_REQUIRED
    answer = stub.QueryRoute(req, metadata=CLIENT_ID, timeout=5)
    assert answer.status.code == pb.Code.TOPIC_NOT_FOUND and "mqctl updateTopic" in answer.status.message


def _producer(client, group, topic: str):
    p = client()
    p.call(op="producer", endpoint=group.master.grpc_addr, topics=[topic])
    return p


def _topic_and_producer(group, client, name: str, queues: int) -> tuple[str, str, Rmq5Client]:
    """A new topic of ``queues`` queues on the group with a producer client of it, and a new consumer group's
    name: (topic, consumer group, producer)."""
    topic, cgroup = harness.unique(name), harness.unique("v2group")
    harness.create_topic(group, topic, queues)
    return topic, cgroup, _producer(client, group, topic)


def _push_until(client, group, topic: str, cgroup: str, fail_once: list[str], consumed) -> list[dict]:
    """A PushConsumer whose listener answers FAILURE once for the bodies in ``fail_once``: waits until
    ``consumed(seen)`` holds and its acks cleared the group's in-flight count; returns what the listener saw."""
    pusher = client()
    pusher.call(op="push_consumer", endpoint=group.master.grpc_addr, group=cgroup, topic=topic, fail_once=fail_once)
    seen: list[dict] = []

    def done() -> bool:
        seen[:] = pusher.call(op="pushed")
        return consumed(seen)

    wait_until(done, 60, lambda: f"the push listener saw {seen}")
    wait_until(lambda: harness.progress(group, cgroup)["inflightTotal"] == 0, 30,
               lambda: f"the push consumer's acks never cleared the in-flight count: {harness.progress(group, cgroup)}")
    return seen


def _consumer(client, group, topic: str, cgroup: str, await_s: int = 3):
    c = client()
    c.call(op="simple_consumer", endpoint=group.master.grpc_addr, group=cgroup, topic=topic, await_s=await_s)
    return c


def _receive_until(consumer, count: int, invisible_s: int, timeout_s: float = 30.0, batch: int = 32) -> list[dict]:
    got: list[dict] = []

    def more() -> bool:
        got.extend(consumer.call(timeout_s=20, op="receive", max=batch, invisible_s=invisible_s)["messages"])
        return len(got) >= count

    wait_until(more, timeout_s, lambda: f"received {len(got)} of {count} messages: {got}")
    return got


def test_a_simple_consumer_with_a_sql92_filter_receives_exactly_the_matching_messages(group, client):
    topic, cgroup = "v2-sql92", "v2-sql92-group"
    harness.create_topic(group, topic, 2)
    producer = client()
    producer.call(op="producer", endpoint=group.master.grpc_addr, topics=[topic])
    sent = {}
    for i in range(20):
        receipt = producer.call(op="send", topic=topic, body=f"m{i}", tag="even" if i % 2 == 0 else "odd",
                                props={"n": str(i), "region": "eu" if i % 3 == 0 else "us"})
        sent[receipt["message_id"]] = i
    want = {mid for mid, i in sent.items() if i > 4 and sent[mid] % 3 == 0}  # n > 4 AND region = 'eu'
    consumer = client()
    consumer.call(op="simple_consumer", endpoint=group.master.grpc_addr, group=cgroup, topic=topic, await_s=2,
                  sql="n > 4 AND region = 'eu'")
    got = _receive_until(consumer, len(want), invisible_s=30)
    for m in got:
        consumer.call(op="ack", id=m["id"])
    assert {m["id"] for m in got} == want
    rest = consumer.call(timeout_s=20, op="receive", max=32, invisible_s=30)["messages"]
    assert rest == []  # nothing else matches


def test_simple_consumer_receives_acks_and_an_unacked_message_comes_back_with_attempt_2(group, client):
    topic, cgroup, producer = _topic_and_producer(group, client, "v2pop", 2)
    sent = {producer.call(op="send", topic=topic, body=f"m{i}", tag="TagA", keys=[f"k{i}"],
                          props={"i": str(i)})["message_id"]: f"m{i}" for i in range(3)}
    consumer = _consumer(client, group, topic, cgroup)
    got = _receive_until(consumer, 3, invisible_s=10)
    assert {m["id"]: m["body"] for m in got} == sent
    assert all(m["attempt"] == 1 and m["tag"] == "TagA" and not m["corrupted"] for m in got)
    assert {m["props"]["i"] for m in got} == {"0", "1", "2"}
    kept = got[0]
    for m in got[1:]:
        consumer.call(op="ack", id=m["id"])
    again = _receive_until(consumer, 1, invisible_s=10, timeout_s=40)
    assert [(m["id"], m["attempt"], m["body"]) for m in again] == [(kept["id"], 2, kept["body"])]
    consumer.call(op="ack", id=again[0]["id"])
    empty = consumer.call(timeout_s=20, op="receive", max=32, invisible_s=10)
    assert empty["messages"] == [] and empty["elapsed_s"] >= 2.5  # an empty long poll waits the asked 3 s


def test_a_delayed_message_is_received_after_its_delivery_timestamp_and_not_before(group, client):
    """Producer delivery_timestamp (RocketMQ 5's delay): stored in the broker's schedule topic and handed to the
    consumer only once due; a message sent after it without a delay arrives first."""
    topic, cgroup, producer = _topic_and_producer(group, client, "v2delay", 1)
    due_s = producer.call(op="send", topic=topic, body="later", delay_s=5)["due_s"]
    producer.call(op="send", topic=topic, body="now")
    consumer = _consumer(client, group, topic, cgroup)
    seen: list[tuple[str, int | None, int]] = []

    def both() -> bool:
        answer = consumer.call(timeout_s=20, op="receive", max=32, invisible_s=30)
        for m in answer["messages"]:
            seen.append((m["body"], m["delivery_ms"], answer["returned_ms"]))
            consumer.call(op="ack", id=m["id"])
        return len(seen) >= 2

    wait_until(both, 60, lambda: f"received {seen}")
    assert [body for body, _, _ in seen] == ["now", "later"]
    _, delivery_ms, returned_ms = seen[1]
    assert delivery_ms == due_s * 1000
    assert returned_ms >= delivery_ms  # never handed out before it was due


def test_change_invisible_duration_gives_a_handle_that_acks(group, client):
    topic, cgroup, producer = _topic_and_producer(group, client, "v2chg", 1)
    producer.call(op="send", topic=topic, body="slow")
    consumer = _consumer(client, group, topic, cgroup)
    [m] = _receive_until(consumer, 1, invisible_s=10)
    consumer.call(op="change", id=m["id"], invisible_s=20)
    consumer.call(op="ack", id=m["id"])  # with the handle the change returned
    empty = consumer.call(timeout_s=20, op="receive", max=32, invisible_s=10)
    assert empty["messages"] == []


def _metric(broker, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``, from the broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and labels.items() <= s.labels.items())


def test_a_message_never_acked_goes_to_the_dlq_after_retry_max_times(group, client):
    """...and /metrics follows it: in flight while invisible, revived once, then dead-lettered."""
    topic, cgroup, producer = _topic_and_producer(group, client, "v2dlq", 1)
    ok_json("updateSubGroup", "-n", group.namesrv_addr, "-c", harness.CLUSTER, "-g", cgroup, "-r", "1")
    sent = producer.call(op="send", topic=topic, body="poison")["message_id"]
    consumer = _consumer(client, group, topic, cgroup)
    by_group = {"topic": topic, "consumer_group": cgroup}
    attempts = [m["attempt"] for m in _receive_until(consumer, 1, invisible_s=10)]
    assert _metric(group.master, "rocketmq_consumer_inflight_messages", is_retry="false", **by_group) == 1
    attempts += [m["attempt"] for m in _receive_until(consumer, 1, invisible_s=10, timeout_s=40)]
    assert attempts == [1, 2]
    assert _metric(group.master, "rocketmq_consumer_inflight_messages", is_retry="true", **by_group) == 1
    dlq = f"%DLQ%{cgroup}"
    wait_until(lambda: _queue_max_offsets(group, dlq) == 1, 40, f"{sent} never reached {dlq}")
    assert consumer.call(timeout_s=20, op="receive", max=32, invisible_s=10)["messages"] == []
    assert _metric(group.master, "rocketmq_consumer_inflight_messages", consumer_group=cgroup) == 0
    assert _metric(group.master, "rocketmq_pop_revive_retry_messages_total", consumer_group=cgroup,
                   put_status="PUT_OK") == 1
    assert _metric(group.master, "rocketmq_send_to_dlq_messages_total", **by_group) == 1
    assert _metric(group.master, "rocketmq_messages_out_total", **by_group) == 2
    assert _metric(group.master, "rocketmq_pop_revive_in_message_total", consumer_group=cgroup,
                   revive_message_type="CK") >= 2
    assert _metric(group.master, "rocketmq_rpc_latency_milliseconds_count", protocol_type="grpc",
                   request_code="ReceiveMessage", response_code="MESSAGE_NOT_FOUND", is_long_polling="true") >= 1


def test_route_from_any_broker_names_every_group_master_with_its_own_endpoint(group, group_b):
    topic = harness.unique("v2route")
    _create_on_both(group, group_b, topic, 3)
    expected = {(harness.BROKER_NAME, group.master.grpc_port), (BROKER_B, group_b.grpc_port)}
    for access_point in (group.master.grpc_addr, group.slave.grpc_addr, group_b.grpc_addr):
        with grpc.insecure_channel(access_point) as channel:
            stub = sgrpc.MessagingServiceStub(channel)
            route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT_ID,
                                    timeout=5)
            assignment = stub.QueryAssignment(spb.QueryAssignmentRequest(topic=pb.Resource(name=topic)),
                                              metadata=CLIENT_ID, timeout=5)
        assert route.status.code == pb.Code.OK, (access_point, route.status)
        queues = {(q.broker.name, q.broker.id, q.broker.endpoints.addresses[0].port, q.id, q.permission)
                  for q in route.message_queues}
        assert queues == {(name, 0, port, qid, pb.Permission.READ_WRITE) for name, port in expected
                          for qid in range(3)}, access_point
        assert {(a.message_queue.broker.name, a.message_queue.broker.endpoints.addresses[0].port,
                 a.message_queue.id) for a in assignment.assignments} == {(n, p, -1) for n, p in expected}


def test_official_client_sends_to_and_receives_from_both_broker_groups(group, group_b, client):
    topic, cgroup = harness.unique("v2both"), harness.unique("v2group")
    _create_on_both(group, group_b, topic, 2)
    producer = _producer(client, group, topic)
    sent = {producer.call(op="send", topic=topic, body=f"m{i}")["message_id"] for i in range(24)}
    assert len(sent) == 24
    on_a, on_b = _queue_max_offsets(group, topic), _queue_max_offsets(group, topic, BROKER_B)
    assert on_a + on_b == 24 and on_a > 0 and on_b > 0  # round-robin over the queues of both groups
    consumer = client()  # access point: the other group's master; it learns group A's endpoint from the route
    consumer.call(op="simple_consumer", endpoint=group_b.grpc_addr, group=cgroup, topic=topic, await_s=2)
    got: list[dict] = []

    def drained() -> bool:
        batch = consumer.call(timeout_s=20, op="receive", max=32, invisible_s=30)["messages"]
        for m in batch:
            consumer.call(op="ack", id=m["id"])
        got.extend(batch)
        return {m["id"] for m in got} >= sent

    wait_until(drained, 60, lambda: f"received {len({m['id'] for m in got})} of 24: {sorted(m['body'] for m in got)}")
    assert sorted(m["id"] for m in got) == sorted(sent)  # each once: acked within the invisible time


def test_consumer_progress_shows_a_pop_groups_messages_in_flight(group, client):
    topic, cgroup, producer = _topic_and_producer(group, client, "v2prog", 1)
    for i in range(3):
        producer.call(op="send", topic=topic, body=f"m{i}")
    consumer = _consumer(client, group, topic, cgroup)
    got = _receive_until(consumer, 3, invisible_s=60)
    consumer.call(op="ack", id=got[1]["id"])
    progress = harness.progress(group, cgroup)
    [row] = [q for q in progress["queues"] if q["topic"] == topic]
    assert (row["brokerOffset"], row["consumerOffset"], row["diff"], row["inflight"]) == (3, 3, 0, 2)
    assert progress["inflightTotal"] == 2
    assert cgroup in {r["group"] for r in harness.progress(group, None)}
    for m in (got[0], got[2]):
        consumer.call(op="ack", id=m["id"])
    assert harness.progress(group, cgroup)["inflightTotal"] == 0


def test_rocketmq5_consumers_and_producers_show_in_the_brokers_connection_lists(group, client):
    """Operators see RocketMQ 5 clients as RocketMQ's proxy registers them: consumerConnection lists the client
    (language PYTHON from x-mq-language, the broker's version), the group is online in consumerProgress, and
    a producer is listed under its topic; a terminated client leaves the list."""
    topic, cgroup, producer = _topic_and_producer(group, client, "v2conn", 1)
    producer.call(op="send", topic=topic, body="m")
    consumer = _consumer(client, group, topic, cgroup)
    [m] = _receive_until(consumer, 1, invisible_s=30)
    consumer.call(op="ack", id=m["id"])  # the group has progress, so consumerProgress lists it
    conn = ok_json("consumerConnection", "-n", group.namesrv_addr, "-g", cgroup)
    [member] = conn["connections"]
    assert (member["language"], member["version"]) == ("PYTHON", 407) and member["clientAddr"].startswith("127.")
    assert (conn["consumeType"], conn["messageModel"]) == ("CONSUME_ACTIVELY", "CLUSTERING")
    assert {s["topic"]: s["subExpression"] for s in conn["subscriptions"]}[topic] == "*"
    [row] = [r for r in harness.progress(group, None) if r["group"] == cgroup]
    assert (row["count"], row["version"]) == (1, "PYTHON:407")

    answer = _remoting(group.master.addr,
                       lambda r: r.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, ext={"producerGroup": topic}))
    assert answer.code == 0 and b"PYTHON" in answer.body, answer.remark
    consumer.close()  # NotifyClientTermination
    [row] = [r for r in harness.progress(group, None) if r["group"] == cgroup]
    assert (row["count"], row["version"]) == (0, "OFFLINE")


SHARED_MESSAGES = 10_000  # the figure: 0 lost and 0 delivered twice among acked ones


def test_two_simple_consumers_of_a_group_share_10000_messages_and_never_get_one_twice(group, client):
    topic, cgroup, producer = _topic_and_producer(group, client, "v2share", 4)
    sent = producer.call(timeout_s=600, op="send_many", topic=topic, count=SHARED_MESSAGES, prefix="m")
    consumers = [_consumer(client, group, topic, cgroup, await_s=1) for _ in range(2)]
    # both drain at once, each acking what it got at once (well within the 60 s invisible time)
    calls = [(c, c.begin(op="drain", invisible_s=60, idle_receives=3, total_s=300)) for c in consumers]
    parts = [c.result(cmd, timeout_s=400) for c, cmd in calls]
    ids = [m["id"] for part in parts for m in part]
    assert len(ids) == len(set(ids)), "a message reached both consumers while it was invisible"
    assert set(ids) == set(sent) and len(sent) == SHARED_MESSAGES
    assert all(m["attempt"] == 1 for part in parts for m in part)
    assert all(len(part) > 0 for part in parts), [len(p) for p in parts]


def test_push_consumer_receives_acks_and_a_failed_message_comes_back_with_attempt_2(group, client):
    topic, cgroup, producer = _topic_and_producer(group, client, "v2push", 2)
    sent = {producer.call(op="send", topic=topic, body=f"p{i}")["message_id"]: f"p{i}" for i in range(5)}
    seen = _push_until(client, group, topic, cgroup, ["p2"],
                       lambda seen: {m["id"] for m in seen if m["result"] == "SUCCESS"} == set(sent))
    assert [(m["attempt"], m["result"]) for m in seen if m["body"] == "p2"] == [(1, "FAILURE"), (2, "SUCCESS")]
    assert all(m["attempt"] == 1 for m in seen if m["body"] != "p2")


def _orderly_topic(group, client, name: str, queues: int, bodies: list[str], **group_overrides) -> tuple[str, str]:
    """A new topic of ``queues`` queues holding ``bodies``, sent in that order as message group order-1, and a new
    consumer group with RocketMQ 5's consumeMessageOrderly (mqadmin updateSubGroup -o true) on the master; returns
    (topic, consumer group)."""
    topic, cgroup, producer = _topic_and_producer(group, client, name, queues)
    config = group_config(cgroup, consumeMessageOrderly=True, **group_overrides)
    resp = _remoting(group.master.addr, lambda r: r.create_group(config))
    assert resp.code == 0, resp.remark
    for body in bodies:
        producer.call(op="send", topic=topic, body=body, group="order-1")
    return topic, cgroup


def test_fifo_simple_consumer_gets_a_message_group_in_send_order_across_a_redelivery(group, client):
    """consumeMessageOrderly: while a batch of a queue is in flight nothing more of that queue is handed out; the
    un-acked message comes back (attempt 2) before the later ones."""
    bodies = [f"o{i}" for i in range(6)]
    topic, cgroup = _orderly_topic(group, client, "v2fifo", 2, bodies)
    consumer = _consumer(client, group, topic, cgroup)
    first = _receive_until(consumer, 2, invisible_s=10, batch=2)
    assert [(m["body"], m["attempt"], m["group"]) for m in first] == [("o0", 1, "order-1"), ("o1", 1, "order-1")]
    consumer.call(op="ack", id=first[0]["id"])
    blocked = consumer.call(timeout_s=20, op="receive", max=32, invisible_s=10)
    assert blocked["messages"] == []  # o1 is in flight: the order lock holds the queue
    rest = _receive_until(consumer, 5, invisible_s=30, timeout_s=40)  # once o1's 10 s are over
    assert [(m["body"], m["attempt"]) for m in rest] == [("o1", 2)] + [(b, 1) for b in bodies[2:]]
    for m in rest:
        consumer.call(op="ack", id=m["id"])
    assert consumer.call(timeout_s=20, op="receive", max=32, invisible_s=10)["messages"] == []


def test_fifo_message_never_acked_goes_to_the_dlq_and_its_queue_moves_on(group, client):
    topic, cgroup = _orderly_topic(group, client, "v2fifodlq", 1, ["poison", "next"], retryMaxTimes=1)
    consumer = _consumer(client, group, topic, cgroup)
    seen = [(m["body"], m["attempt"]) for m in _receive_until(consumer, 1, invisible_s=10, batch=1)]
    seen += [(m["body"], m["attempt"]) for m in _receive_until(consumer, 1, invisible_s=10, batch=1, timeout_s=40)]
    assert seen == [("poison", 1), ("poison", 2)]
    [after] = _receive_until(consumer, 1, invisible_s=10, batch=1, timeout_s=40)
    assert (after["body"], after["attempt"]) == ("next", 1)
    assert _queue_max_offsets(group, f"%DLQ%{cgroup}") == 1


def test_fifo_push_consumer_retries_a_failed_message_before_the_next_of_its_group(group, client):
    """The settings answer fifo=true for an orderly group, so the official PushConsumer consumes each message group
    in order and retries a FAILURE locally before it goes on."""
    bodies = [f"p{i}" for i in range(5)]
    topic, cgroup = _orderly_topic(group, client, "v2fifopush", 2, bodies)
    seen = _push_until(client, group, topic, cgroup, ["p2"],
                       lambda seen: {m["body"] for m in seen if m["result"] == "SUCCESS"} == set(bodies))
    assert [(m["body"], m["result"]) for m in seen] == [
        ("p0", "SUCCESS"), ("p1", "SUCCESS"), ("p2", "FAILURE"), ("p2", "SUCCESS"), ("p3", "SUCCESS"),
        ("p4", "SUCCESS")]


def _revive_records(broker, cluster: str = harness.CLUSTER) -> list[tuple[int, str, bytes]]:
    """The broker's revive queue as (offset, tag, body), read over remoting like any topic."""
    records = _remoting(broker.addr, lambda r: r.pull_all("revive_reader", revive_topic(cluster), 0))
    return [(m.queue_offset, m.properties.get("TAGS", ""), m.body) for m in records]


def _pop_state(records) -> PopState:
    state = PopState()
    for _, tag, body in records:
        if tag == TAG_CK:
            state.add_checkpoint(Checkpoint.from_json(body))
        elif tag == TAG_ACK:
            state.add_ack(Ack.from_json(body))
    return state


def _after_restart(consumer, timeout_s: float = 60, **cmd):
    """``consumer.call(**cmd)`` once the client reaches the restarted broker. Its gRPC channel saw the broker go away
    and sits in gRPC's reconnect backoff for a while: calls fail at once with UNAVAILABLE (nothing was sent, so a
    retry is safe); the official client does not retry them itself."""
    answer: list = []

    def attempt() -> bool:
        try:
            answer.append(consumer.call(timeout_s=120, **cmd))
        except ClientError as exc:
            if "StatusCode.UNAVAILABLE" not in exc.error:  # the error itself, not the client's log
                answer.append(exc)  # not the reconnect backoff: stop waiting and raise it
                return True
            raise  # the wait retries, and reports the last one if it never gets through
        return True

    wait_until(attempt, timeout_s, f"the client never reached the restarted broker for {cmd['op']}")
    if isinstance(answer[0], ClientError):
        raise answer[0]
    return answer[0]


@pytest.fixture
def crash_group(tmp_path):
    """A group of its own, whose master the test kills. Consumer offsets are persisted only at a clean stop
    (flushConsumerOffsetInterval 10 min), so a crash rolls the master's offsets back to its start: the worst a crash
    can leave."""
    g = _start_group(tmp_path, slaveReadEnable=True, flushConsumerOffsetInterval=600_000)
    yield g
    for proc in g.procs():
        proc.stop()


def test_a_crashed_master_loses_no_in_flight_message_and_its_slave_holds_the_same_pop_state(crash_group, client):
    g = crash_group
    topic, cgroup, producer = _topic_and_producer(g, client, "v2crash", 2)
    sent = {producer.call(op="send", topic=topic, body=f"m{i}")["message_id"] for i in range(20)}
    consumer = _consumer(client, g, topic, cgroup)
    first = _receive_until(consumer, 10, invisible_s=300, batch=5)
    acked, in_flight = first[:4], first[4:]
    for m in acked:
        consumer.call(op="ack", id=m["id"])

    # the slave holds the same pop state: checkpoints and acks are commitlog records of the revive topic
    master_records = _revive_records(g.master)
    assert {tag for _, tag, _ in master_records} == {TAG_CK, TAG_ACK}
    wait_until(lambda: _revive_records(g.slave) == master_records, harness.READY_S,
               lambda: f"the slave's revive queue {_revive_records(g.slave)} differs from {master_records}")
    assert _pop_state(_revive_records(g.slave)).in_flight_count() == len(in_flight)

    g.slave.stop()  # the restarted master cannot take newer offsets from it: it keeps its own, rolled back
    g.master.kill()
    g.master.start(harness.BOOT_S)
    # the rebuilt state knows every handle from before the crash: ack two, make the rest visible in a second
    for m in in_flight[:2]:
        _after_restart(consumer, op="ack", id=m["id"])
    for m in in_flight[2:]:
        _after_restart(consumer, op="change", id=m["id"], invisible_s=1)
    rest = _after_restart(consumer, op="drain", invisible_s=60, idle_receives=2, total_s=90)
    first_ids = {m["id"] for m in first}
    shortened = {m["id"] for m in in_flight[2:]}
    assert sorted(m["id"] for m in rest) == sorted((sent - first_ids) | shortened)  # each once, nothing acked
    assert {m["id"]: m["attempt"] for m in rest if m["id"] in shortened} == dict.fromkeys(shortened, 2)

    # a second crash, after revives and acks: nothing comes back
    g.master.kill()
    g.master.start(harness.BOOT_S)
    again = _after_restart(consumer, op="drain", invisible_s=60, idle_receives=2, total_s=60)
    assert again == []
    g.slave.start(harness.BOOT_S)
    master_records = _revive_records(g.master)
    wait_until(lambda: _revive_records(g.slave) == master_records, harness.READY_S,
               "the restarted slave never caught up with the master's revive queue")
    assert _pop_state(master_records).in_flight_count() == 0


# bad input (raw grpc.aio calls): a v2 code and a message that says what to do, nothing stored -------------------
STRICT_MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def strict(group, tmp_path_factory):
    """A broker alone (its own cluster on the group's nameserver) that creates neither topics nor groups on demand
    and takes bodies up to 64 KiB."""
    broker = Broker(tmp_path_factory.mktemp("v2-strict"), name="broker-v2-strict", namesrv_addr=group.namesrv_addr,
                    cluster="V2Strict", autoCreateTopicEnable=False, autoCreateSubscriptionGroup=False,
                    maxMessageSize=STRICT_MAX_BODY).start(harness.BOOT_S)
    yield broker
    broker.stop()


@pytest.fixture
async def strict_rpc(strict):
    async with BrokerClient(strict.addr) as remoting, grpc.aio.insecure_channel(strict.grpc_addr) as channel:
        yield sgrpc.MessagingServiceStub(channel), remoting


def _message(topic: str, body: bytes, message_id: str = "01RAWV2TEST") -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
        message_id=message_id, message_type=pb.MessageType.NORMAL, body_encoding=pb.Encoding.IDENTITY))


async def _receive(stub, topic: str, cgroup: str, invisible_ms: int = 10_000, poll_ms: int = 0) -> list:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=cgroup), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=32,
        invisible_duration=Duration(seconds=invisible_ms // 1000, nanos=invisible_ms % 1000 * 1_000_000),
        long_polling_timeout=Duration(seconds=poll_ms // 1000, nanos=poll_ms % 1000 * 1_000_000))
    return [r async for r in stub.ReceiveMessage(req, metadata=CLIENT_ID, timeout=10)]


def _status(responses: list) -> pb.Status:
    [status] = [r.status for r in responses if r.HasField("status")]
    return status


async def test_sends_to_a_missing_topic_or_over_max_message_size_get_v2_codes_and_store_nothing(strict_rpc):
    stub, remoting = strict_rpc
    send = await stub.SendMessage(spb.SendMessageRequest(messages=[_message("v2_no_such_topic", b"x")]),
                                  metadata=CLIENT_ID, timeout=5)
    assert send.status.code == pb.Code.TOPIC_NOT_FOUND and "autoCreateTopicEnable=false" in send.status.message
    assert "v2_no_such_topic" not in await remoting.topic_configs()

    topic = harness.unique("v2big")
    assert (await remoting.create_topic(topic, queues=1)).code == 0
    big = await stub.SendMessage(spb.SendMessageRequest(messages=[_message(topic, b"x" * (STRICT_MAX_BODY + 1))]),
                                 metadata=CLIENT_ID, timeout=5)
    assert big.status.code == pb.Code.MESSAGE_BODY_TOO_LARGE and "split it" in big.status.message
    fits = await stub.SendMessage(spb.SendMessageRequest(messages=[_message(topic, b"x" * STRICT_MAX_BODY)]),
                                  metadata=CLIENT_ID, timeout=5)
    assert fits.status.code == pb.Code.OK and fits.entries[0].offset == 0  # the refused one took no offset
    # past maxMessageSize + the 1 MiB envelope gRPC itself refuses the request, before the broker sees it
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.SendMessage(spb.SendMessageRequest(messages=[_message(topic, b"x" * (STRICT_MAX_BODY + 2**20))]),
                               metadata=CLIENT_ID, timeout=5)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_receives_for_a_missing_topic_or_group_or_an_invisible_time_out_of_range_store_nothing(strict_rpc):
    stub, remoting = strict_rpc
    topic, cgroup = harness.unique("v2recv"), harness.unique("v2group")
    missing = _status(await _receive(stub, "v2_no_such_topic", cgroup))
    assert missing.code == pb.Code.TOPIC_NOT_FOUND and "mqctl updateTopic" in missing.message
    assert (await remoting.create_topic(topic, queues=1)).code == 0
    for _ in range(2):  # the first refusal created nothing
        no_group = _status(await _receive(stub, topic, cgroup))
        assert no_group.code == pb.Code.CONSUMER_GROUP_NOT_FOUND and "mqctl updateSubGroup" in no_group.message
    for invisible_ms in (1, 13 * 3600 * 1000):  # checked first: a group that would be created on demand is not
        out_of_range = _status(await _receive(stub, topic, harness.unique("v2group"), invisible_ms))
        assert out_of_range.code == pb.Code.ILLEGAL_INVISIBLE_TIME and "range" in out_of_range.message
    assert not [t for t in await remoting.topic_configs() if t.startswith("%RETRY%")]


def _forge(handle: str, **fields: int | str) -> str:
    """A receipt handle with some of its 9 fields replaced (names as in broker.grpc_v2.pop.receipt)."""
    names = ["start", "pop_time", "invisible", "revive_qid", "topic_type", "broker", "queue", "offset", "commitlog"]
    parts = handle.split(" ")
    for name, value in fields.items():
        parts[names.index(name)] = str(value)
    return " ".join(parts)


async def test_forged_stale_and_foreign_receipt_handles_get_invalid_receipt_handle_and_store_nothing(strict_rpc):
    stub, remoting = strict_rpc
    topic, cgroup = harness.unique("v2handle"), harness.unique("v2group")
    assert (await remoting.create_topic(topic, queues=1)).code == 0
    assert (await remoting.create_group(group_config(cgroup))).code == 0
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[_message(topic, b"one")]), metadata=CLIENT_ID,
                                  timeout=5)
    assert sent.status.code == pb.Code.OK
    [message] = [r.message for r in await _receive(stub, topic, cgroup, poll_ms=3000) if r.HasField("message")]
    handle = message.system_properties.receipt_handle
    revive = revive_topic("V2Strict")
    records_before = await _max_offset(remoting, revive)

    async def ack(h: str) -> pb.Status:
        answer = await stub.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name=cgroup), topic=pb.Resource(name=topic),
            entries=[spb.AckMessageEntry(message_id=message.system_properties.message_id, receipt_handle=h)]),
            metadata=CLIENT_ID, timeout=5)
        return answer.status

    bad = {
        "not a handle": "9 space-separated fields",
        _forge(handle, broker="broker-elsewhere"): "ack on the broker the message came from",
        _forge(handle, pop_time=1000): "expired",
        _forge(handle, offset=7): "no in-flight message",
    }
    for forged, hint in bad.items():
        st = await ack(forged)
        assert st.code == pb.Code.INVALID_RECEIPT_HANDLE and hint in st.message, (forged, st)
    change = await stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=cgroup), topic=pb.Resource(name=topic), receipt_handle=handle,
        invisible_duration=Duration(seconds=13 * 3600), message_id=message.system_properties.message_id),
        metadata=CLIENT_ID, timeout=5)
    assert change.status.code == pb.Code.ILLEGAL_INVISIBLE_TIME
    dlq = await stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=cgroup), topic=pb.Resource(name=topic), receipt_handle=_forge(handle, offset=7)),
        metadata=CLIENT_ID, timeout=5)
    assert dlq.status.code == pb.Code.INVALID_RECEIPT_HANDLE
    assert await _max_offset(remoting, revive) == records_before  # no ack or checkpoint record written
    assert f"%DLQ%{cgroup}" not in await remoting.topic_configs()
    assert (await ack(handle)).code == pb.Code.OK
    stale = await ack(handle)
    assert stale.code == pb.Code.INVALID_RECEIPT_HANDLE and "acked already" in stale.message
    assert await _max_offset(remoting, revive) == records_before + 1  # the one good ack


async def _max_offset(remoting: BrokerClient, topic: str) -> int:
    resp = await remoting.request(RequestCode.GET_MAX_OFFSET, ext={"topic": topic, "queueId": "0"})
    assert resp.code == 0, resp.remark
    return int(resp.ext["offset"])


def _telemetry_settings() -> spb.TelemetryCommand:
    return spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="any")])))


async def _first_answer(stub, metadata, first: spb.TelemetryCommand | None):
    """Open a Telemetry stream that sends ``first`` (or nothing) and stays open: (the call, the first answer)."""

    async def commands():
        if first is not None:
            yield first
        await asyncio.Event().wait()  # held open until the call is cancelled

    call = stub.Telemetry(commands(), metadata=metadata)
    return call, await call.read()


async def _open_in_waves(stub, metadatas: list, wave: int = 100) -> list:
    """``_first_answer`` for each metadata, ``wave`` streams at a time: together with the streams the service holds
    open they stay under the connection's ``grpcMaxConcurrentStreams`` (256), so HTTP/2 refuses none of them and
    every answer is the service's."""
    out: list = []
    for i in range(0, len(metadatas), wave):
        out += await asyncio.gather(*(_first_answer(stub, md, _telemetry_settings()) for md in metadatas[i:i + wave]))
    return out


async def test_telemetry_without_settings_and_a_thousand_streams_get_v2_codes(strict):
    async with grpc.aio.insecure_channel(strict.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        silent = asyncio.ensure_future(_first_answer(stub, CLIENT_ID, None))
        _, wrong_first = await _first_answer(stub, CLIENT_ID, spb.TelemetryCommand(
            thread_stack_trace=spb.ThreadStackTrace(nonce="x")))
        assert wrong_first.status.code == pb.Code.BAD_REQUEST and "must be settings" in wrong_first.status.message

        # one client id, 1,000 streams: a few are served, the rest refused at once
        opened = await _open_in_waves(stub, [[("x-mq-client-id", "pytest@greedy")]] * 1000)
        served = [call for call, answer in opened if answer.status.code == pb.Code.OK]
        refused = [answer for _, answer in opened if answer.status.code == pb.Code.TOO_MANY_REQUESTS]
        assert len(served) == MAX_STREAMS_PER_CLIENT and len(refused) == 1000 - len(served)
        assert "close idle clients" in refused[0].status.message
        # 1,000 client ids on one connection: capped per connection too, before any client is recorded
        many = await _open_in_waves(stub, [[("x-mq-client-id", f"pytest@{i}")] for i in range(1000)])
        assert sum(answer.status.code == pb.Code.OK for _, answer in many) <= MAX_STREAMS_PER_CONNECTION
        for call, _ in opened + many:
            call.cancel()

        _, silent_answer = await asyncio.wait_for(silent, SETTINGS_WAIT_S + 10)
        assert silent_answer.status.code == pb.Code.BAD_REQUEST and "sends its Settings first" in \
            silent_answer.status.message
    # the slots are given back when the streams end: a new stream of the greedy client is served
    async with grpc.aio.insecure_channel(strict.grpc_addr) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        answers: list = []

        async def served() -> bool:  # the broker notices the cancelled streams asynchronously
            call, answer = await _first_answer(stub, [("x-mq-client-id", "pytest@greedy")], _telemetry_settings())
            call.cancel()
            answers.append(answer.status)
            return answer.status.code == pb.Code.OK

        await async_wait_until(served, harness.READY_S, lambda: f"a new stream refused: {answers[-1:]}", 0.2)
